//! What a descriptor means for the compiler: dependencies of an Index, computability, and
//! the mapping from output Index to input Cindex.

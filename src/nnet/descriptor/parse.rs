//! Parsing the descriptor config syntax, normalising it, and printing Kaldi's canonical form.

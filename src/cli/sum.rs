//! `compnet matrix-sum` and `compnet vector-sum` (Kaldi's binaries of those names), in their
//! three forms:
//! 1. tables to a table (`<rspec1> [<rspec2> ...] <wspec>`): per key of the first table, the
//!    sum (`--scale1`, `--scale2` for matrices; `--average`) over the tables that have the key;
//! 2. one table to one object (`<rspec> <wxfilename>`): the sum over all keys, accumulated in
//!    double precision (vector-sum: `--average` divides by their number);
//! 3. objects to one object (`<rx1> <rx2> ... <wxfilename>`): the sum (matrix-sum:
//!    `--average`); as in Kaldi, a vector may be longer than those before it (they are padded
//!    with zeros), otherwise the sizes must agree.

use crate::cli::args::command_args;
use crate::cli::kaldi_args::KaldiBool;
use crate::error::{Error, Result};
use crate::io::table::{
    parse_rspecifier, parse_wspecifier, read_object, write_object, RandomAccessTableReader,
    SequentialTableReader, TableObject, TableWriter,
};
use crate::log::{log, warn};
use crate::matrix::{Matrix, Vector};

command_args! {
    /// Options of `compnet matrix-sum`.
    #[usage("compnet matrix-sum [options] <matrix-in-rspecifier1> [<matrix-in-rspecifier2> ...] <matrix-out-wspecifier>\n       compnet matrix-sum [options] <matrix-in-rspecifier> <matrix-out-wxfilename>\n       compnet matrix-sum [options] <matrix-in-rxfilename1> <matrix-in-rxfilename2> ... <matrix-out-wxfilename>")]
    #[example("compnet matrix-sum --binary=false 1.mat 2.mat 3.mat sum.mat")]
    pub struct MatrixArgs {
        /// Scale of the first table's matrices (tables only).
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        pub scale1: f32,
        /// Scale of the second table's matrices (tables only).
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        pub scale2: f32,
        /// Write a single output in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// The average instead of the sum (tables to a table, or objects to an object).
        #[arg(long, kaldi_bool = "false")]
        pub average: bool,
        /// The inputs, then the output.
        pub args: Vec<String>,
    }
}

command_args! {
    /// Options of `compnet vector-sum`.
    #[usage("compnet vector-sum [options] <vector-in-rspecifier1> [<vector-in-rspecifier2> ...] <vector-out-wspecifier>\n       compnet vector-sum [options] <vector-in-rspecifier> <vector-out-wxfilename>\n       compnet vector-sum [options] <vector-in-rxfilename1> <vector-in-rxfilename2> ... <vector-out-wxfilename>")]
    #[example("compnet vector-sum --binary=false 1.vec 2.vec 3.vec sum.vec")]
    pub struct VectorArgs {
        /// Write a single output in binary.
        #[arg(long, kaldi_bool = "true")]
        pub binary: bool,
        /// The average instead of the sum (one table to one object).
        #[arg(long, kaldi_bool = "false")]
        pub average: bool,
        /// The inputs, then the output.
        pub args: Vec<String>,
    }
}

/// A matrix or a vector as the sums see it: rows, columns and the values row by row.
trait Summand: TableObject + Sized {
    const NOUN: &'static str;
    fn shape(&self) -> (usize, usize);
    fn values(&self) -> Vec<f32>;
    fn build(rows: usize, cols: usize, values: Vec<f32>) -> Self;
    /// The size as Kaldi's messages print it.
    fn size_text(shape: (usize, usize)) -> String;
}

impl Summand for Matrix {
    const NOUN: &'static str = "matrix";
    fn shape(&self) -> (usize, usize) {
        (self.num_rows(), self.num_cols())
    }
    fn values(&self) -> Vec<f32> {
        self.to_vec()
    }
    fn build(rows: usize, cols: usize, values: Vec<f32>) -> Self {
        Matrix::from_vec(rows, cols, values)
    }
    fn size_text((r, c): (usize, usize)) -> String {
        format!("{r} by {c}")
    }
}

impl Summand for Vector {
    const NOUN: &'static str = "vector";
    fn shape(&self) -> (usize, usize) {
        (1, self.dim())
    }
    fn values(&self) -> Vec<f32> {
        self.to_vec()
    }
    fn build(_rows: usize, _cols: usize, values: Vec<f32>) -> Self {
        Vector::from_vec(values)
    }
    fn size_text((_, c): (usize, usize)) -> String {
        c.to_string()
    }
}

fn plural(noun: &str) -> &'static str {
    if noun == "matrix" {
        "matrices"
    } else {
        "vectors"
    }
}

/// Tables to a table: returns the exit status.
fn tables<T: Summand>(
    program: &str,
    args: &[String],
    scales: (f32, f32),
    average: bool,
) -> Result<i32> {
    let n = args.len();
    let (first, out) = (&args[0], &args[n - 1]);
    let mut writer = TableWriter::<T>::open(out)?;
    let reader = SequentialTableReader::<T>::open(first)?;
    let mut others = args[1..n - 1]
        .iter()
        .map(|r| RandomAccessTableReader::<T>::open(r))
        .collect::<Result<Vec<_>>>()?;
    // --average: every table scaled by 1/(number of tables), as a float.
    let avg_scale = 1.0f32 / (n - 1) as f32;
    let (mut n_utts, mut n_total, mut n_success, mut n_missing) = (0usize, 0, 0, 0);
    for item in reader {
        let (key, first_obj) = item?;
        n_utts += 1;
        n_total += 1;
        let shape = first_obj.shape();
        let s1 = if average { avg_scale } else { scales.0 };
        let mut sum: Vec<f32> = first_obj.values().iter().map(|&x| x * s1).collect();
        for (i, r) in others.iter_mut().enumerate() {
            if !r.has_key(&key)? {
                warn(
                    program,
                    &format!(
                        "No {} found for utterance {key} for system {}, rspecifier: {}",
                        T::NOUN,
                        i + 2,
                        args[i + 1]
                    ),
                );
                n_missing += 1;
                continue;
            }
            let other = r.value(&key)?;
            n_total += 1;
            if other.shape() != shape {
                warn(
                    program,
                    &format!(
                        "Dimension mismatch for utterance {key} : {} for system {}, \
                         rspecifier: {} vs {} primary {}, rspecifier:{first}",
                        T::size_text(other.shape()),
                        i + 2,
                        args[i + 1],
                        T::size_text(shape),
                        T::NOUN
                    ),
                );
                continue;
            }
            let s = if average {
                avg_scale
            } else if i == 0 {
                scales.1
            } else {
                1.0
            };
            for (y, x) in sum.iter_mut().zip(other.values()) {
                *y += s * x;
            }
        }
        writer.write(&key, &T::build(shape.0, shape.1, sum))?;
        n_success += 1;
    }
    writer.close()?;
    let pl = plural(T::NOUN);
    log(
        program,
        &format!(
            "Processed {n_utts} utterances: with a total of {n_total} {pl} across {} different \
             systems",
            n - 1
        ),
    );
    log(
        program,
        &format!("Produced output for {n_success} utterances; {n_missing} total missing {pl}"),
    );
    Ok(
        if n_success != 0 && (n_missing as i64) < n_success as i64 - n_missing as i64 {
            0
        } else {
            1
        },
    )
}

/// One table to one object, summed in double precision: returns the exit status.
fn table_to_object<T: Summand>(
    program: &str,
    rspec: &str,
    out: &str,
    binary: bool,
    average: bool,
) -> Result<i32> {
    let mut sum: Vec<f64> = Vec::new();
    let mut shape = (0, 0);
    let (mut num_done, mut num_err) = (0usize, 0usize);
    for item in SequentialTableReader::<T>::open(rspec)? {
        let (key, obj) = item?;
        let s = obj.shape();
        if s.0 * s.1 == 0 {
            warn(program, &format!("Zero {} input for key {key}", T::NOUN));
            num_err += 1;
            continue;
        }
        if sum.is_empty() {
            shape = s;
            sum = vec![0.0; s.0 * s.1];
        }
        if s != shape {
            warn(
                program,
                &format!(
                    "Dimension mismatch for key {key}: {} vs. {}",
                    T::size_text(s),
                    T::size_text(shape)
                ),
            );
            num_err += 1;
            continue;
        }
        for (y, x) in sum.iter_mut().zip(obj.values()) {
            *y += f64::from(x);
        }
        num_done += 1;
    }
    if average && num_done > 0 {
        let scale = 1.0 / num_done as f64;
        sum.iter_mut().for_each(|y| *y *= scale);
    }
    let values = sum.iter().map(|&y| y as f32).collect();
    write_object(out, binary, &T::build(shape.0, shape.1, values))?;
    log(
        program,
        &format!(
            "Summed {num_done} {}, {num_err} with errors; wrote sum to {}",
            plural(T::NOUN),
            printable(out)
        ),
    );
    Ok(if num_done > 0 && num_err < num_done {
        0
    } else {
        1
    })
}

/// Objects to one object: returns the exit status.
fn objects<T: Summand>(program: &str, args: &[String], binary: bool, average: bool) -> Result<i32> {
    let n = args.len();
    let mut shape = (0usize, 0usize);
    let mut sum: Vec<f32> = Vec::new();
    for rx in &args[..n - 1] {
        if parse_rspecifier(rx).is_ok() {
            return Err(Error::Usage(format!(
                "{rx}: wrong usage: if the first and last arguments are not tables, the \
                 arguments between them must not be tables"
            )));
        }
        let obj: T = read_object(rx)?;
        let s = obj.shape();
        if s.0 > shape.0 || s.1 > shape.1 {
            let grown = (s.0.max(shape.0), s.1.max(shape.1));
            let mut bigger = vec![0.0f32; grown.0 * grown.1];
            for r in 0..shape.0 {
                bigger[r * grown.1..r * grown.1 + shape.1]
                    .copy_from_slice(&sum[r * shape.1..(r + 1) * shape.1]);
            }
            sum = bigger;
            shape = grown;
        }
        if s != shape {
            // Kaldi grows the sum to the larger size and then requires equal sizes.
            return Err(Error::Compute(format!(
                "{rx}: a {} {}, but the sum so far is {}",
                T::size_text(s),
                T::NOUN,
                T::size_text(shape)
            )));
        }
        let v = obj.values();
        for r in 0..s.0 {
            for c in 0..s.1 {
                sum[r * shape.1 + c] += v[r * s.1 + c];
            }
        }
    }
    if average {
        let scale = (1.0 / (n - 1) as f64) as f32;
        sum.iter_mut().for_each(|y| *y *= scale);
    }
    let out = &args[n - 1];
    write_object(out, binary, &T::build(shape.0, shape.1, sum))?;
    log(
        program,
        &format!(
            "Summed {} {}; wrote sum to {}",
            n - 1,
            plural(T::NOUN),
            printable(out)
        ),
    );
    Ok(0)
}

/// A wxfilename as Kaldi's messages print it (`-` is "standard output").
fn printable(wx: &str) -> &str {
    if wx.is_empty() || wx == "-" {
        "standard output"
    } else {
        wx
    }
}

/// Which of the three forms the arguments take.
enum Form {
    Tables,
    TableToObject,
    Objects,
}

fn form(args: &[String], usage: &str) -> Result<Form> {
    let n = args.len();
    if n < 2 {
        return Err(Error::Usage(usage.into()));
    }
    let first_table = parse_rspecifier(&args[0]).is_ok();
    let last_table = parse_wspecifier(&args[n - 1]).is_ok();
    Ok(if last_table {
        Form::Tables
    } else if n == 2 && first_table {
        Form::TableToObject
    } else if !first_table {
        Form::Objects
    } else {
        return Err(Error::Usage(usage.into()));
    })
}

/// Runs `matrix-sum`.
pub fn run_matrix(a: MatrixArgs) -> Result<i32> {
    const P: &str = "compnet matrix-sum";
    let usage = "usage: matrix-sum [options] <matrix-in-rspecifier1> [<matrix-in-rspecifier2> \
                 ...] <matrix-out-wspecifier> | <matrix-in-rspecifier> <matrix-out-wxfilename> \
                 | <matrix-in-rxfilename1> ... <matrix-out-wxfilename>";
    let scaled = a.scale1 != 1.0 || a.scale2 != 1.0;
    match form(&a.args, usage)? {
        Form::Tables => tables::<Matrix>(P, &a.args, (a.scale1, a.scale2), a.average),
        Form::TableToObject | Form::Objects if scaled => Err(Error::Usage(
            "--scale1 and --scale2 apply only to tables summed into a table".into(),
        )),
        Form::TableToObject if a.average => Err(Error::Usage(
            "--average is not compatible with summing one table into one matrix".into(),
        )),
        Form::TableToObject => {
            table_to_object::<Matrix>(P, &a.args[0], &a.args[1], a.binary, false)
        }
        Form::Objects => objects::<Matrix>(P, &a.args, a.binary, a.average),
    }
}

/// Runs `vector-sum`.
pub fn run_vector(a: VectorArgs) -> Result<i32> {
    const P: &str = "compnet vector-sum";
    let usage = "usage: vector-sum [options] <vector-in-rspecifier1> [<vector-in-rspecifier2> \
                 ...] <vector-out-wspecifier> | <vector-in-rspecifier> <vector-out-wxfilename> \
                 | <vector-in-rxfilename1> ... <vector-out-wxfilename>";
    match form(&a.args, usage)? {
        // vector-sum's --average applies only to one table summed into one vector.
        Form::Tables => tables::<Vector>(P, &a.args, (1.0, 1.0), false),
        Form::TableToObject => {
            table_to_object::<Vector>(P, &a.args[0], &a.args[1], a.binary, a.average)
        }
        Form::Objects => objects::<Vector>(P, &a.args, a.binary, false),
    }
}

//! The field layout of Kaldi component files: `<TypeName>`, then `<Token> value` pairs, then
//! `</TypeName>`. A component's `write` lists its fields once with [`write_component`] (or
//! [`write_updatable`] after the learning-rate fields); its `read` takes them back with
//! [`read_field`] and [`read_opt_field`]. The bytes are those Kaldi writes.

use super::UpdatableCommon;
use crate::error::{Error, Result};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::{Matrix, Vector, Vector64, WeightMatrix};

/// A value that follows its `<Token>` in a component file.
pub trait WriteField {
    /// Writes the value (the token is already written).
    fn write_value(&self, w: &mut TokenWriter);
    /// Whether the field is written at all: an absent optional field writes no token.
    fn present(&self) -> bool {
        true
    }
}

/// The scalars, each written and read by the token writer's and reader's method of its name.
macro_rules! scalar_fields {
    ($($ty:ident),+) => {$(
        impl WriteField for $ty {
            fn write_value(&self, w: &mut TokenWriter) {
                w.$ty(*self);
            }
        }
        impl ReadField for $ty {
            fn read_value(r: &mut TokenReader<'_>) -> Result<Self> {
                r.$ty()
            }
        }
    )+};
}
scalar_fields!(f32, f64, i32, bool);

/// A dimension, written as Kaldi's int32.
impl WriteField for usize {
    fn write_value(&self, w: &mut TokenWriter) {
        w.i32(*self as i32);
    }
}
impl WriteField for Vec<i32> {
    fn write_value(&self, w: &mut TokenWriter) {
        w.int_vec(self);
    }
}
impl<const N: usize> WriteField for [f32; N] {
    fn write_value(&self, w: &mut TokenWriter) {
        w.vector(self);
    }
}
impl WriteField for Vector {
    fn write_value(&self, w: &mut TokenWriter) {
        w.vector(&self.to_vec());
    }
}
/// Statistics Kaldi keeps in doubles, written as a double vector.
impl WriteField for Vector64 {
    fn write_value(&self, w: &mut TokenWriter) {
        w.vector_f64(&self.to_vec());
    }
}
impl WriteField for Matrix {
    fn write_value(&self, w: &mut TokenWriter) {
        w.matrix(self);
    }
}
impl WriteField for WeightMatrix {
    fn write_value(&self, w: &mut TokenWriter) {
        w.matrix(self);
    }
}
/// Two values after one token (Kaldi's `<RankInOut>`, `<AlphaInOut>`).
impl<A: WriteField, B: WriteField> WriteField for (A, B) {
    fn write_value(&self, w: &mut TokenWriter) {
        self.0.write_value(w);
        self.1.write_value(w);
    }
}
/// An optional field: `None` writes neither token nor value.
impl<T: WriteField> WriteField for Option<T> {
    fn write_value(&self, w: &mut TokenWriter) {
        if let Some(v) = self {
            v.write_value(w);
        }
    }
    fn present(&self) -> bool {
        self.as_ref().is_some_and(|v| v.present())
    }
}

/// A bare token with no value, written only when set (Kaldi's `<TestMode>` in some layouts).
pub struct Flag(pub bool);

impl Flag {
    /// The flag as a `'static` value, for a field list returned from a method.
    pub fn of(set: bool) -> &'static Flag {
        if set {
            &Flag(true)
        } else {
            &Flag(false)
        }
    }
}

impl WriteField for Flag {
    fn write_value(&self, _w: &mut TokenWriter) {}
    fn present(&self) -> bool {
        self.0
    }
}

/// One field: its token and its value.
pub type Field<'a> = (&'a str, &'a dyn WriteField);

/// Writes each present field as `<Token> value`.
pub fn write_fields(w: &mut TokenWriter, fields: &[Field<'_>]) {
    for (token, value) in fields.iter().filter(|(_, v)| v.present()) {
        w.token(token);
        value.write_value(w);
    }
}

/// Writes a whole component: `<TypeName>`, the fields, `</TypeName>`.
pub fn write_component(w: &mut TokenWriter, type_name: &str, fields: &[Field<'_>]) {
    w.token(&format!("<{type_name}>"));
    write_fields(w, fields);
    w.token(&format!("</{type_name}>"));
}

/// Writes a whole updatable component: `<TypeName>`, the learning-rate fields, the fields,
/// `</TypeName>`.
pub fn write_updatable(
    w: &mut TokenWriter,
    type_name: &str,
    common: &UpdatableCommon,
    fields: &[Field<'_>],
) {
    common.write(w, type_name);
    write_fields(w, fields);
    w.token(&format!("</{type_name}>"));
}

/// A value read back after its `<Token>`.
pub trait ReadField: Sized {
    fn read_value(r: &mut TokenReader<'_>) -> Result<Self>;
}

impl ReadField for Vec<i32> {
    fn read_value(r: &mut TokenReader<'_>) -> Result<Self> {
        r.int_vec()
    }
}
impl<A: ReadField, B: ReadField> ReadField for (A, B) {
    fn read_value(r: &mut TokenReader<'_>) -> Result<Self> {
        Ok((A::read_value(r)?, B::read_value(r)?))
    }
}
impl ReadField for Vector {
    fn read_value(r: &mut TokenReader<'_>) -> Result<Self> {
        r.vector()
    }
}
impl ReadField for Matrix {
    fn read_value(r: &mut TokenReader<'_>) -> Result<Self> {
        r.matrix()
    }
}

/// `<Token>` then its value.
pub fn read_field<T: ReadField>(r: &mut TokenReader<'_>, token: &str) -> Result<T> {
    r.expect_token(token)?;
    T::read_value(r)
}

/// `<Token>` and its value if the next token is `<Token>`, else nothing.
pub fn read_opt_field<T: ReadField>(r: &mut TokenReader<'_>, token: &str) -> Result<Option<T>> {
    if r.try_token(token)? {
        Ok(Some(T::read_value(r)?))
    } else {
        Ok(None)
    }
}

/// If the next token is `<Token>`, reads its value into `field` (which otherwise keeps its
/// default).
pub fn read_opt_into<T: ReadField>(
    r: &mut TokenReader<'_>,
    token: &str,
    field: &mut T,
) -> Result<()> {
    if let Some(v) = read_opt_field(r, token)? {
        *field = v;
    }
    Ok(())
}

/// `<Token>` then a vector of exactly `N` values.
pub fn read_array_field<const N: usize>(r: &mut TokenReader<'_>, token: &str) -> Result<[f32; N]> {
    r.expect_token(token)?;
    let at = r.pos();
    let v = r.vector()?;
    v.to_vec()
        .try_into()
        .map_err(|_| r.err_at(at, format!("a {token} vector of dimension {N}")))
}

/// `<Token>` then a vector of exactly `dim` values.
pub fn read_vector_field(r: &mut TokenReader<'_>, token: &str, dim: usize) -> Result<Vector> {
    r.expect_token(token)?;
    let at = r.pos();
    let v = r.vector()?;
    if v.dim() != dim {
        return Err(r.err_at(at, format!("a {token} vector of dimension {dim}")));
    }
    Ok(v)
}

/// `<Token>` then a dimension (a positive int32 within the memory limit).
pub fn read_dim_field(r: &mut TokenReader<'_>, token: &str, what: &str) -> Result<usize> {
    r.expect_token(token)?;
    read_positive_i32(r, what)
}

/// `<Token>` then a positive count (see [`read_positive_count`]).
pub fn read_count_field(r: &mut TokenReader<'_>, token: &str, what: &str) -> Result<i32> {
    r.expect_token(token)?;
    read_positive_count(r, what)
}

/// `token` then a positive int32 (not held against the memory limit; the error names the
/// token).
pub fn read_pos_i32(r: &mut TokenReader<'_>, token: &str) -> Result<usize> {
    r.expect_token(token)?;
    Ok(read_positive_count(r, &format!("value after {token}"))? as usize)
}

/// A vector that must not be empty (`what` names it in the error).
pub fn read_nonempty_vector(r: &mut TokenReader<'_>, what: &str) -> Result<Vector> {
    let at = r.pos();
    let v = r.vector()?;
    if v.dim() == 0 {
        return Err(r.err_at(at, format!("a non-empty {what} vector")));
    }
    Ok(v)
}

/// Consumes the closing `</TypeName>` token.
pub fn expect_closing(r: &mut TokenReader<'_>, type_name: &str) -> Result<()> {
    r.expect_token(&format!("</{type_name}>"))
}

/// Reads an int32 that must be strictly positive.
pub fn read_positive_i32(r: &mut TokenReader<'_>, what: &str) -> Result<usize> {
    let at = r.pos();
    let v = r.i32()?;
    if v <= 0 {
        return Err(r.err_at(at, format!("a positive {what}")));
    }
    // A dim read from a file sizes vectors before anything else bounds it.
    crate::limits::check_elements(v as u64, 4, &format!("{what} {v}"))
        .map_err(|m| r.err_at(at, format!("a {what} within the memory limit: {m}")))?;
    Ok(v as usize)
}

/// A positive integer read from a file that sizes nothing (a period, an interval, a count of
/// regions): unlike a dim it is not held against the memory limit, so whatever a config
/// accepted reads back.
pub fn read_positive_count(r: &mut TokenReader<'_>, what: &str) -> Result<i32> {
    let at = r.pos();
    let v = r.i32()?;
    if v <= 0 {
        return Err(r.err_at(at, format!("a positive {what}")));
    }
    Ok(v)
}

/// A dimension error while reading a component at byte `at`.
pub fn dim_error(r: &TokenReader<'_>, at: usize, what: impl Into<String>) -> Error {
    r.err_at(at, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_in_both_modes() {
        for binary in [false, true] {
            let mut w = TokenWriter::new(binary);
            let v = Vector::from_vec(vec![1.5, -2.0]);
            write_component(
                &mut w,
                "TestComponent",
                &[
                    ("<Dim>", &3usize),
                    ("<Scale>", &0.5f32),
                    ("<Absent>", &None::<f32>),
                    ("<TestMode>", &Flag(false)),
                    ("<Continuous>", &Flag(true)),
                    ("<Params>", &v),
                    ("<Flag>", &true),
                ],
            );
            let bytes = w.into_bytes();
            let mut r = TokenReader::new(&bytes, binary, "test");
            r.expect_token("<TestComponent>").unwrap();
            assert_eq!(read_dim_field(&mut r, "<Dim>", "dimension").unwrap(), 3);
            assert_eq!(read_field::<f32>(&mut r, "<Scale>").unwrap(), 0.5);
            assert_eq!(read_opt_field::<f32>(&mut r, "<Absent>").unwrap(), None);
            assert!(!r.try_token("<TestMode>").unwrap());
            assert!(r.try_token("<Continuous>").unwrap());
            assert_eq!(read_field::<Vector>(&mut r, "<Params>").unwrap(), v);
            assert!(read_field::<bool>(&mut r, "<Flag>").unwrap());
            expect_closing(&mut r, "TestComponent").unwrap();
            assert!(r.at_eof());
        }
    }
}

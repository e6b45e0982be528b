//! Reading and writing model files: the raw nnet3 network (`<Nnet3> ... </Nnet3>`) and Kaldi's
//! acoustic model `final.mdl` (a TransitionModel followed by the network, the stored context and
//! the priors), in text and binary (facts §2.3, §2.5).
//!
//! Layout of a raw network: the `\0B` header (binary files only), `<Nnet3>` and a newline, one
//! config line per node (text even in binary files), an empty line, `<NumComponents>` and then,
//! per component, `<ComponentName> name` followed by the component itself, and `</Nnet3>`. The
//! components are read before the config lines are applied, so that `component-node` lines
//! resolve against them.
//!
//! Every malformed input gives an [`Error::Format`] with the byte offset and what was expected;
//! counts are checked against the bytes that remain before anything is allocated.

use crate::error::{Error, Result};
use crate::io::{TokenReader, TokenWriter};
use crate::matrix::Vector;
use crate::nnet::component::{component_type, read_component, Component};
use crate::nnet::config_line::is_valid_name;
use crate::nnet::Nnet;

pub use crate::nnet::network::MAX_COMPONENTS;

/// The acoustic-model part of a `final.mdl` (everything but the network itself).
#[derive(Clone, Debug, Default)]
pub struct AmInfo {
    /// The TransitionModel exactly as it appeared in the file (not interpreted).
    pub transition_model: Vec<u8>,
    /// Whether `transition_model` is in binary form.
    pub transition_model_binary: bool,
    /// `<LeftContext>` as stored (Kaldi recomputes it from the network on read).
    pub left_context: i32,
    /// `<RightContext>` as stored.
    pub right_context: i32,
    /// `<Priors>` (may be empty).
    pub priors: Vector,
}

/// What a model file held: the network, and the acoustic-model fields for a `final.mdl`.
#[derive(Debug)]
pub struct ReadModel {
    /// The network.
    pub nnet: Nnet,
    /// True if the file was binary.
    pub binary: bool,
    /// Present when the file was a `final.mdl` (TransitionModel + AmNnetSimple).
    pub am: Option<AmInfo>,
}

impl Nnet {
    /// Reads a raw network or a `final.mdl` from memory; `file` names it in error messages.
    pub fn read_model(bytes: &[u8], file: &str) -> Result<ReadModel> {
        let mut r = TokenReader::detect(bytes, file)?;
        let binary = r.is_binary();
        let mut am = None;
        let is_am = matches!(r.peek_token(), Ok(t) if t == "<TransitionModel>");
        let tm_range = if is_am {
            let start = r.pos();
            skip_transition_model(&mut r)?;
            Some((start, r.pos()))
        } else {
            None
        };
        let nnet = read_nnet_body(&mut r)?;
        if let Some((a, b)) = tm_range {
            r.expect_token("<LeftContext>")?;
            let left_context = r.i32()?;
            r.expect_token("<RightContext>")?;
            let right_context = r.i32()?;
            r.expect_token("<Priors>")?;
            let priors = r.vector()?;
            am = Some(AmInfo {
                transition_model: bytes.get(a..b).unwrap_or_default().to_vec(),
                transition_model_binary: binary,
                left_context,
                right_context,
                priors,
            });
        }
        r.skip_ws();
        if !r.at_eof() {
            return Err(r.err("end of file after the model"));
        }
        Ok(ReadModel { nnet, binary, am })
    }

    /// Reads a model file (`-` = stdin); see [`Nnet::read_model`].
    pub fn read_model_file(path: &str) -> Result<ReadModel> {
        // Any rxfilename, as Kaldi's tools take: a file, `-`, `file:offset` or `command |`.
        let (bytes, start, name) = crate::io::table::read_rxfilename(path)?;
        Nnet::read_model(&bytes[start..], &name)
    }

    /// Writes the network as a raw nnet3 model, exactly as Kaldi's `nnet3-copy` does
    /// (including the `\0B` header when binary).
    pub fn write_model(&self, binary: bool) -> Vec<u8> {
        let mut w = TokenWriter::new(binary);
        w.binary_header();
        self.write_nnet_body(&mut w);
        w.into_bytes()
    }

    /// Writes the network to a wxfilename: a file (atomically), `-` (stdout) or `| command`;
    /// see [`Nnet::write_model`].
    pub fn write_model_file(&self, path: &str, binary: bool) -> Result<()> {
        crate::io::table::write_bytes(path, &self.write_model(binary))
    }

    /// Writes `<Nnet3> ... </Nnet3>` (no stream header) into `w`.
    pub fn write_nnet_body(&self, w: &mut TokenWriter) {
        w.token("<Nnet3>");
        // The config section is plain text lines in both modes.
        w.raw(b"\n");
        for line in self.config_lines() {
            w.raw(line.as_bytes());
            w.raw(b"\n");
        }
        w.raw(b"\n");
        w.token("<NumComponents>");
        w.i32(self.components.len() as i32);
        w.newline_if_text();
        for (name, c) in self.component_names.iter().zip(&self.components) {
            w.token("<ComponentName>");
            w.token(name);
            c.write(w);
            w.newline_if_text();
        }
        w.token("</Nnet3>");
    }
}

/// Reads `<Nnet3> ... </Nnet3>` (the stream header, if any, already consumed).
fn read_nnet_body(r: &mut TokenReader<'_>) -> Result<Nnet> {
    r.expect_token("<Nnet3>")?;
    // The rest of the `<Nnet3>` line must be blank.
    let file = r.file().to_string();
    let buf = r.buf();
    let mut pos = r.pos();
    if buf.get(pos.wrapping_sub(1)) != Some(&b'\n') {
        while let Some(&b) = buf.get(pos) {
            pos += 1;
            if b == b'\n' {
                break;
            }
            if !b.is_ascii_whitespace() {
                return Err(r.err_at(pos - 1, "a newline after <Nnet3>"));
            }
        }
    }
    // Config lines up to an empty line; remember where each starts for error messages.
    let config_start = pos;
    let mut line_starts: Vec<usize> = Vec::new();
    loop {
        let rest = buf.get(pos..).unwrap_or_default();
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            return Err(Error::format(
                &file,
                buf.len(),
                "an empty line ending the config section of the network",
                "end of file",
            ));
        };
        let line = &rest[..nl];
        let blank = line.iter().all(|b| b.is_ascii_whitespace());
        if blank {
            pos += nl + 1;
            break;
        }
        line_starts.push(pos);
        pos += nl + 1;
    }
    let config_end = line_starts
        .last()
        .map_or(config_start, |&s| s + line_len(buf, s) + 1);
    let config_bytes = buf.get(config_start..config_end).unwrap_or_default();
    let config_text = std::str::from_utf8(config_bytes).map_err(|e| {
        Error::format(
            &file,
            config_start + e.valid_up_to(),
            "UTF-8 text in the config section",
            crate::io::codec::describe(buf, config_start + e.valid_up_to()),
        )
    })?;
    r.set_pos(pos);

    r.expect_token("<NumComponents>")?;
    let count_at = r.pos();
    let n = r.i32()?;
    // Each component needs at least `<ComponentName> x <T> </T> ` (about 20 bytes).
    if !(0..MAX_COMPONENTS).contains(&n) || n as usize > r.rest().len() / 20 + 1 {
        return Err(r.err_at(
            count_at,
            format!(
                "a component count in 0..{MAX_COMPONENTS} that fits the {} remaining bytes (got {n})",
                r.rest().len()
            ),
        ));
    }
    let n = n as usize;
    let mut names: Vec<String> = Vec::with_capacity(n);
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut components: Vec<Box<dyn Component>> = Vec::with_capacity(n);
    for _ in 0..n {
        r.expect_token("<ComponentName>")?;
        let (name_at, name) = r.token_at()?;
        if !is_valid_name(&name) {
            return Err(r.err_at(name_at, format!("a valid component name (got '{name}')")));
        }
        if !seen.insert(name.clone()) {
            return Err(r.err_at(
                name_at,
                format!("a component name not used before (got duplicate '{name}')"),
            ));
        }
        let type_at = r.next_token_pos();
        let tok = r.peek_token()?;
        let type_name = crate::nnet::component::type_of_token(&tok)
            .ok_or_else(|| r.err_at(type_at, "a component type token like <AffineComponent>"))?;
        if component_type(type_name).is_none() {
            return Err(Error::format(
                &file,
                type_at,
                format!("a known component type for component '{name}'"),
                format!("unknown component type {type_name}"),
            ));
        }
        let c = read_component(r)?;
        names.push(name);
        components.push(c);
    }
    r.expect_token("</Nnet3>")?;
    let after = r.pos();

    let mut nnet = Nnet {
        component_names: names,
        components,
        ..Default::default()
    };
    // The config section names nodes only; components came from the file above.
    nnet.apply_config_text(config_text, &file, &mut crate::random::seeded_rng(0))
        .map_err(|e| config_error_to_format(e, &file, buf, config_start, &line_starts))?;
    r.set_pos(after);
    Ok(nnet)
}

/// Length of the line starting at `start` (without its newline).
fn line_len(buf: &[u8], start: usize) -> usize {
    let rest = buf.get(start..).unwrap_or_default();
    rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len())
}

/// Turns an error from applying the config section into a byte-offset error.
fn config_error_to_format(
    e: Error,
    file: &str,
    buf: &[u8],
    config_start: usize,
    line_starts: &[usize],
) -> Error {
    match e {
        Error::Parse { pos, msg } => {
            // Lines are numbered in the config text we passed (1-based, no blank lines).
            let start = pos
                .line
                .checked_sub(1)
                .and_then(|i| line_starts.get(i))
                .copied()
                .unwrap_or(config_start);
            let line = buf
                .get(start..start + line_len(buf, start))
                .unwrap_or_default();
            let col_bytes = String::from_utf8_lossy(line)
                .chars()
                .take(pos.column.saturating_sub(1))
                .map(char::len_utf8)
                .sum::<usize>();
            Error::format(
                file,
                start + col_bytes,
                "a valid config line in the network's node section",
                format!("{msg} (in \"{}\")", String::from_utf8_lossy(line)),
            )
        }
        Error::Format { .. } | Error::Io { .. } => e,
        other => Error::format(
            file,
            config_start,
            "a consistent network in the node section",
            other.to_string(),
        ),
    }
}

/// Skips a TransitionModel (`<TransitionModel> ... </TransitionModel>`).
///
/// Binary: parsed field by field (HmmTopology, Triples/Tuples, LogProbs) so that damage is
/// reported where it is; if that fails, falls back to searching for the closing token. Text:
/// tokens are skipped up to `</TransitionModel>`.
fn skip_transition_model(r: &mut TokenReader<'_>) -> Result<()> {
    let start = r.pos();
    r.expect_token("<TransitionModel>")?;
    if r.is_binary() {
        let body = r.pos();
        match skip_transition_model_binary(r) {
            Ok(()) => return Ok(()),
            Err(structural) => {
                r.set_pos(body);
                return match find_token(r.rest(), b"</TransitionModel>") {
                    Some(i) => {
                        r.set_pos(body + i);
                        r.expect_token("</TransitionModel>")
                    }
                    None => Err(structural),
                };
            }
        }
    }
    loop {
        if r.at_eof() {
            return Err(r.err_at(start, "a TransitionModel ending in </TransitionModel>"));
        }
        r.skip_ws();
        if r.at_eof() {
            return Err(r.err("</TransitionModel> closing the transition model"));
        }
        if r.token()? == "</TransitionModel>" {
            return Ok(());
        }
    }
}

/// Position of `tok` followed by whitespace in `buf`.
fn find_token(buf: &[u8], tok: &[u8]) -> Option<usize> {
    buf.windows(tok.len() + 1)
        .position(|w| w.starts_with(tok) && w[tok.len()].is_ascii_whitespace())
}

/// Parses the binary TransitionModel body after `<TransitionModel>`.
fn skip_transition_model_binary(r: &mut TokenReader<'_>) -> Result<()> {
    r.expect_token("<Topology>")?;
    r.int_vec()?; // phones
    r.int_vec()?; // phone2idx
    let mut num_entries = r.i32()?;
    let separate_self_loop = num_entries == -1;
    if separate_self_loop {
        num_entries = r.i32()?;
    }
    check_count(r, num_entries, 5)?;
    for _ in 0..num_entries {
        let num_states = r.i32()?;
        check_count(r, num_states, 10)?;
        for _ in 0..num_states {
            r.i32()?; // forward pdf class
            if separate_self_loop {
                r.i32()?; // self-loop pdf class
            }
            let num_trans = r.i32()?;
            check_count(r, num_trans, 10)?;
            for _ in 0..num_trans {
                r.i32()?;
                r.f32()?;
            }
        }
    }
    r.expect_token("</Topology>")?;
    let (close, width) = match r.token()?.as_str() {
        "<Triples>" => ("</Triples>", 3),
        "<Tuples>" => ("</Tuples>", 4),
        _ => return Err(r.err("<Triples> or <Tuples>")),
    };
    let n = r.i32()?;
    check_count(r, n, 5 * width)?;
    for _ in 0..n * width as i32 {
        r.i32()?;
    }
    r.expect_token(close)?;
    r.expect_token("<LogProbs>")?;
    r.vector()?;
    r.expect_token("</LogProbs>")?;
    r.expect_token("</TransitionModel>")?;
    Ok(())
}

/// Checks a count read from a file: non-negative and each item taking `min_bytes` must fit.
fn check_count(r: &TokenReader<'_>, n: i32, min_bytes: usize) -> Result<()> {
    match r.count_fits(n, min_bytes) {
        Some(_) => Ok(()),
        None => Err(r.err(format!(
            "a count that fits the {} remaining bytes (got {n})",
            r.rest().len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary TransitionModel written by hand from the layout in facts §2.5.
    fn binary_transition_model(tuples: bool) -> Vec<u8> {
        let mut w = TokenWriter::new(true);
        w.token("<TransitionModel>");
        w.token("<Topology>");
        w.int_vec(&[1, 2]);
        w.int_vec(&[-1, 0, 0]);
        if tuples {
            w.i32(-1);
        }
        w.i32(1); // one entry
        w.i32(2); // two states
        w.i32(0);
        if tuples {
            w.i32(1);
        }
        w.i32(2);
        w.i32(0);
        w.f32(0.5);
        w.i32(1);
        w.f32(0.5);
        w.i32(-1); // final state: no pdf class
        if tuples {
            w.i32(-1);
        }
        w.i32(0);
        w.token("</Topology>");
        w.token(if tuples { "<Tuples>" } else { "<Triples>" });
        w.i32(2);
        for p in 1..=2 {
            w.i32(p);
            w.i32(0);
            w.i32(p - 1);
            if tuples {
                w.i32(p - 1);
            }
        }
        w.token(if tuples { "</Tuples>" } else { "</Triples>" });
        w.token("<LogProbs>");
        w.vector(&[0.0, -0.69, -0.69, -0.69, -0.69]);
        w.token("</LogProbs>");
        w.token("</TransitionModel>");
        w.into_bytes()
    }

    #[test]
    fn binary_transition_model_is_parsed_structurally() {
        for tuples in [false, true] {
            let tm = binary_transition_model(tuples);
            // The structural parse alone must reach the closing token.
            let mut r = TokenReader::new(&tm, true, "tm");
            r.expect_token("<TransitionModel>").unwrap();
            if let Err(e) = skip_transition_model_binary(&mut r) {
                panic!("tuples={tuples}: {e}");
            }
            assert!(r.at_eof());
        }
    }

    #[test]
    fn text_transition_model_is_skipped() {
        let text = b"<TransitionModel> \n<Topology> \n<TopologyEntry> \n<ForPhones> \n1 2 \n</ForPhones> \n<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State> \n<State> 1 </State> \n</TopologyEntry> \n</Topology> \n<Triples> 2 \n1 0 0 \n2 0 1 \n</Triples> \n<LogProbs> \n [ 0 -0.69 -0.69 ]\n</LogProbs> \n</TransitionModel> \n<Nnet3>";
        let mut r = TokenReader::new(text, false, "tm");
        assert!(skip_transition_model(&mut r).is_ok());
        assert_eq!(r.peek_token().ok().as_deref(), Some("<Nnet3>"));
    }

    #[test]
    fn truncated_transition_model_is_an_error() {
        let tm = binary_transition_model(false);
        for cut in 0..tm.len() {
            let mut r = TokenReader::new(&tm[..cut], true, "tm");
            assert!(skip_transition_model(&mut r).is_err(), "cut at {cut}");
        }
    }
}

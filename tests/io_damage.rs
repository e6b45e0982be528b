//! Malformed archives, scripts and specifiers give errors that say where and what, never panics.

use compnet::io::sparse::{GeneralMatrix, Posterior, SparseMatrix};
use compnet::io::table::{
    parse_rspecifier, parse_wspecifier, MatrixWriter, SequentialMatrixReader, SequentialTableReader,
};
use compnet::matrix::{Matrix, Vector};
use proptest::prelude::*;

const FORMATS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi/formats");

fn first_err<T: compnet::io::TableObject>(bytes: &[u8]) -> String {
    let r = SequentialTableReader::<T>::from_archive_bytes(bytes.to_vec(), "bad.ark");
    for item in r {
        if let Err(e) = item {
            return e.to_string();
        }
    }
    String::from("<no error>")
}

fn le(v: i32) -> Vec<u8> {
    let mut b = vec![4u8];
    b.extend_from_slice(&v.to_le_bytes());
    b
}

#[test]
fn specifier_validity_follows_kaldi() {
    for ok in [
        "ark:x",
        "scp:x",
        "ark,t:x",
        "ark,s,cs:-",
        "ark,bg:gunzip -c foo.gz|",
        "ark,o,p,b:x",
        "scp,np,ns,ncs,no:x",
        "ark:",
    ] {
        assert!(parse_rspecifier(ok).is_ok(), "{ok}");
    }
    for (bad, why) in [
        ("ark, t:x", "empty option"),
        (" ark:x", "empty option"),
        ("ark:x ", "trailing whitespace"),
        ("x.ark", "expected ark"),
        ("ark,scp:x", "exactly one"),
        ("t:x", "expected ark or scp"),
        ("ark,f:x", "unknown option"),
    ] {
        let e = parse_rspecifier(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
    for ok in [
        "ark:x",
        "ark,t:x",
        "ark,scp:a,b",
        "ark,scp,t,f:a,b",
        "scp:x",
        "ark,nf,p:-",
    ] {
        assert!(parse_wspecifier(ok).is_ok(), "{ok}");
    }
    let w = parse_wspecifier("ark,scp,t:a.ark,b,c.scp").unwrap();
    assert_eq!(
        (w.archive.as_deref(), w.script.as_deref(), w.binary),
        (Some("a.ark"), Some("b,c.scp"), false)
    );
    for (bad, why) in [
        ("scp,ark:a,b", "ark must come first"),
        ("ark,scp:a", "two filenames"),
        ("ark, t:x", "empty option"),
        ("ark,s:x", "unknown option"),
        ("t:x", "expected ark"),
    ] {
        let e = parse_wspecifier(bad).unwrap_err().to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn malformed_archives_name_the_byte_offset() {
    let mut trunc = b"u1 \0BFM ".to_vec();
    trunc.extend(le(3));
    trunc.extend(le(2));
    trunc.extend([0u8; 10]);
    let mut huge_cm = b"u1 \0BCM2 ".to_vec();
    huge_cm.extend(0f32.to_le_bytes());
    huge_cm.extend(1f32.to_le_bytes());
    huge_cm.extend(1_000_000_000i32.to_le_bytes());
    huge_cm.extend(1_000_000_000i32.to_le_bytes());
    let mut neg = b"u1 \0BFM ".to_vec();
    neg.extend(le(-3));
    neg.extend(le(2));
    let mut cm_short_hdr = b"u1 \0BCM ".to_vec();
    cm_short_hdr.extend([0u8; 7]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            trunc,
            "bad.ark: at byte 18: expected 3x2 matrix data (file truncated)",
        ),
        (huge_cm, "only 0 left (file truncated)"),
        (
            neg,
            "bad.ark: at byte 5: expected non-negative matrix dimensions",
        ),
        (
            cm_short_hdr,
            "at byte 8: expected 16-byte compressed-matrix header",
        ),
        (
            b"u1 \0XFM ".to_vec(),
            "at byte 4: expected 'B' after the binary marker",
        ),
        (
            b"u1".to_vec(),
            "at byte 2: expected a space after key \"u1\"",
        ),
        (
            b"u1 \0BQQ ".to_vec(),
            "at byte 5: expected matrix token FM, DM, CM, CM2 or CM3",
        ),
        (b"u1  [\n 1 2\n 3 ]\n".to_vec(), "rows of equal length"),
        (
            b"u1  [ 1 x ]\n".to_vec(),
            "at byte 8: expected a number in the matrix",
        ),
        (
            b"u1  [ 1 2\n".to_vec(),
            "']' closing the matrix (file truncated)",
        ),
        (
            b"u1  1 2 ]\n".to_vec(),
            "at byte 4: expected '[' opening a matrix",
        ),
    ];
    for (bytes, want) in cases {
        let e = first_err::<Matrix>(&bytes);
        assert!(
            e.contains(want),
            "{:?}:\n got  {e}\n want {want}",
            String::from_utf8_lossy(&bytes)
        );
    }
    assert!(first_err::<Vector>(b"v  [ 1\n 2 ]\n").contains("a vector may not span lines"));
    assert!(first_err::<Posterior>(b"p [ 1 0.5 ] [ 2 ]\n").contains("a weight"));
    assert!(first_err::<Posterior>(b"p [ 1 0.5 ] 3\n").contains("'[' opening a posterior frame"));
    assert!(first_err::<SparseMatrix>(b"s rows=1 dim=3 [ 5 1 ]\n")
        .contains("an index in [0, 3), got 5"));
    assert!(first_err::<GeneralMatrix>(b"s rows=x\n").contains("rows=<non-negative integer>"));
}

#[test]
fn bad_scripts_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let scp = dir.path().join("a.scp");
    let fm = format!("{FORMATS}/feats/fm.ark");
    let cases = [
        (
            format!("u1 {fm}:3\n\nu2 {fm}:177\n"),
            "a.scp:2:1: invalid script line",
        ),
        (
            format!("u1 {fm}:3\nonlykey\n"),
            "a.scp:2:1: invalid script line",
        ),
        (
            format!("u1 {fm}:3\nu2 /nonexistent/x.ark:5\n"),
            "a.scp:2: cannot read entry \"u2\"",
        ),
        (format!("u1 {fm}:3[2:1]\n"), "start after end"),
        (format!("u1 {fm}:3[0:9]\n"), "does not fit a 3x13 matrix"),
        (
            format!("u1 {fm}:3[0:1,0:13]\n"),
            "does not fit a 3x13 matrix",
        ),
        (format!("u1 {fm}:3[0:1,]\n"), "bad range specifier"),
        (format!("u1 {fm}:3 0:1]\n"), "without a matching '['"),
        (format!("u1 {fm}:99999\n"), "an offset within the file"),
        (format!("u1 {fm}:4\n"), "a.scp:1: cannot read entry \"u1\""),
    ];
    for (text, want) in cases {
        std::fs::write(&scp, &text).unwrap();
        let res: Result<Vec<_>, _> =
            SequentialMatrixReader::open(&format!("scp:{}", scp.display()))
                .and_then(|r| r.collect());
        let e = res
            .map(|_| "<no error>".to_string())
            .unwrap_or_else(|e| e.to_string());
        assert!(e.contains(want), "{text:?}:\n got  {e}\n want {want}");
    }
    // Permissive reading skips the bad entry.
    std::fs::write(
        &scp,
        format!("u1 {fm}:3\nu2 /nonexistent/x.ark:5\nu3 {fm}:611\n"),
    )
    .unwrap();
    let keys: Vec<String> = SequentialMatrixReader::open(&format!("scp,p:{}", scp.display()))
        .unwrap()
        .map(|x| x.unwrap().0)
        .collect();
    assert_eq!(keys, ["u1", "u3"]);
    // A row range may overshoot the end by up to two rows (clamped), not three.
    std::fs::write(&scp, format!("u1 {fm}:3[1:4]\n")).unwrap();
    let m: Vec<_> = SequentialMatrixReader::open(&format!("scp:{}", scp.display()))
        .unwrap()
        .collect();
    assert_eq!(m[0].as_ref().unwrap().1.num_rows(), 2);
}

#[test]
fn bad_keys_and_unclosed_writers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.ark");
    let mut w = MatrixWriter::open(&format!("ark:{}", out.display())).unwrap();
    let e = w
        .write("has space", &Matrix::zeros(1, 1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid table key"), "{e}");
    w.write("ok", &Matrix::zeros(1, 1)).unwrap();
    drop(w);
    assert!(
        !out.exists(),
        "a writer dropped without close leaves no file"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temp file left"
    );
}

fn golden_archives() -> Vec<Vec<u8>> {
    [
        "feats/fm.ark",
        "feats/cm_auto.ark",
        "feats/cm_speech.ark",
        "feats/cm2.ark",
        "feats/cm3.ark",
        "feats/src.txt",
        "compress-special/int16_m4.ark",
        "vectors/vec.ark",
        "vectors/vec.txt",
        "posteriors/post.ark",
        "posteriors/post.txt",
        "egs/egs.ark",
    ]
    .iter()
    .map(|p| std::fs::read(format!("{FORMATS}/{p}")).unwrap())
    .collect()
}

/// Reads `bytes` as every table type; only checks that nothing panics.
fn read_all_types(bytes: &[u8]) {
    fn drain<T: compnet::io::TableObject>(b: &[u8]) {
        for item in SequentialTableReader::<T>::from_archive_bytes(b.to_vec(), "x") {
            let _ = item;
        }
    }
    drain::<Matrix>(bytes);
    drain::<Vector>(bytes);
    drain::<GeneralMatrix>(bytes);
    drain::<compnet::io::CompressedMatrix>(bytes);
    drain::<SparseMatrix>(bytes);
    drain::<Posterior>(bytes);
    drain::<Vec<i32>>(bytes);
    drain::<compnet::io::egs::NnetExample>(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn damaged_archives_never_panic(
        which in 0usize..12,
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        truncate in any::<bool>(),
    ) {
        let all = golden_archives();
        let mut b = all[which].clone();
        for (i, v) in flips {
            let n = b.len();
            b[i.index(n)] = v;
        }
        if truncate {
            let n = b.len();
            b.truncate(cut.index(n + 1));
        }
        read_all_types(&b);
    }
}

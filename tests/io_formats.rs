//! Kaldi format compatibility: every check compares with bytes Kaldi itself wrote
//! (tests/data/kaldi/formats).

use compnet::cli::copy_feats::{copy_feats, Args};
use compnet::io::codec::fmt_float;
use compnet::io::compressed::{CompressedMatrix, CompressionMethod};
use compnet::io::sparse::Posterior;
use compnet::io::table::{
    self, PosteriorWriter, RandomAccessMatrixReader, SequentialMatrixReader,
    SequentialPosteriorReader, SequentialTableReader, SequentialVectorReader, VectorWriter,
};
use compnet::matrix::Matrix;
use std::path::{Path, PathBuf};
use std::process::Command;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kaldi");

fn formats() -> PathBuf {
    Path::new(GOLDEN).join("formats")
}
fn g(rel: &str) -> String {
    formats().join(rel).to_string_lossy().into_owned()
}
fn read(p: &str) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn args(compress: bool, method: i64, input: &str, output: &str) -> Args {
    Args {
        binary: true,
        compress,
        compression_method: method,
        write_num_frames: String::new(),
        input: input.to_string(),
        output: output.to_string(),
    }
}

/// Runs the library copy-feats into a temp file and returns the bytes.
fn lib_copy(compress: bool, method: i64, input: &str, text: bool) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let ws = format!("ark{}:{}", if text { ",t" } else { "" }, out.display());
    let n =
        copy_feats(&args(compress, method, input, &ws)).unwrap_or_else(|e| panic!("{input}: {e}"));
    assert!(n > 0);
    read(&out.to_string_lossy())
}

fn assert_same(ours: &[u8], golden: &str) {
    let want = read(golden);
    if ours != want.as_slice() {
        let pos = ours
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(want.len()));
        let ctx = |b: &[u8]| {
            String::from_utf8_lossy(&b[pos.saturating_sub(40)..(pos + 40).min(b.len())])
                .into_owned()
        };
        panic!(
            "differs from {golden} at byte {pos} (ours {} bytes, golden {}):\n ours: {:?}\n want: {:?}",
            ours.len(),
            want.len(),
            ctx(ours),
            ctx(&want)
        );
    }
}

#[test]
fn decode_every_feats_archive_to_kaldi_text() {
    for name in ["fm", "cm_auto", "cm_speech", "cm2", "cm3"] {
        let out = lib_copy(
            false,
            1,
            &format!("ark:{}", g(&format!("feats/{name}.ark"))),
            true,
        );
        assert_same(&out, &g(&format!("feats/{name}.txt")));
    }
    for name in ["int16_m4", "uint8_m6", "zeroone_m7"] {
        let out = lib_copy(
            false,
            1,
            &format!("ark:{}", g(&format!("compress-special/{name}.ark"))),
            true,
        );
        assert_same(&out, &g(&format!("compress-special/{name}.txt")));
    }
}

#[test]
fn text_source_round_trips_unchanged() {
    let out = lib_copy(false, 1, &format!("ark:{}", g("feats/src.txt")), true);
    assert_same(&out, &g("feats/src.txt"));
}

#[test]
fn binary_fm_archive_is_byte_identical() {
    let out = lib_copy(false, 1, &format!("ark:{}", g("feats/src.txt")), false);
    assert_same(&out, &g("feats/fm.ark"));
}

#[test]
fn compression_reproduces_kaldi_bytes() {
    for (method, name) in [(1, "cm_auto"), (2, "cm_speech"), (3, "cm2"), (5, "cm3")] {
        let out = lib_copy(true, method, &format!("ark:{}", g("feats/fm.ark")), false);
        assert_same(&out, &g(&format!("feats/{name}.ark")));
    }
    for (method, src, name) in [
        (4, "int16_src", "int16_m4"),
        (6, "uint8_src", "uint8_m6"),
        (7, "zeroone_src", "zeroone_m7"),
    ] {
        let out = lib_copy(
            true,
            method,
            &format!("ark:{}", g(&format!("compress-special/{src}.txt"))),
            false,
        );
        assert_same(&out, &g(&format!("compress-special/{name}.ark")));
    }
}

#[test]
fn recompressing_compressed_input_keeps_bytes() {
    let out = lib_copy(true, 1, &format!("ark:{}", g("feats/cm_auto.ark")), false);
    assert_same(&out, &g("feats/cm_auto.ark"));
}

/// Copies an scp file into `dir`, making its `feats/...` paths absolute.
fn rebase_scp(dir: &Path, rel: &str) -> String {
    let text = String::from_utf8(read(&g(rel))).unwrap();
    let base = format!("{}/", formats().display());
    let fixed: String = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            format!("{k} {base}{v}\n")
        })
        .collect();
    let p = dir.join(Path::new(rel).file_name().unwrap());
    std::fs::write(&p, fixed).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn scp_offsets_and_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let scp = rebase_scp(dir.path(), "feats/fm.scp");
    assert_same(
        &lib_copy(false, 1, &format!("scp:{scp}"), true),
        &g("feats/fm_via_scp.txt"),
    );
    let ranges = rebase_scp(dir.path(), "feats/ranges.scp");
    assert_same(
        &lib_copy(false, 1, &format!("scp:{ranges}"), true),
        &g("feats/ranges.txt"),
    );
    // Every compressed scp entry points at the same object as the archive.
    for name in ["cm_auto", "cm_speech", "cm2", "cm3"] {
        let scp = rebase_scp(dir.path(), &format!("feats/{name}.scp"));
        assert_same(
            &lib_copy(false, 1, &format!("scp:{scp}"), true),
            &g(&format!("feats/{name}.txt")),
        );
        if name == "cm_auto" {
            assert_same(
                &lib_copy(true, 1, &format!("scp:{scp}"), false),
                &g("feats/cm_auto.ark"),
            );
        }
    }
}

#[test]
fn ark_scp_writer_gives_kaldi_offsets() {
    // Run the binary inside a temp folder shaped like formats/, so the scp names match.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("feats")).unwrap();
    for (extra, name) in [
        (vec![], "fm"),
        (vec!["--compress=true"], "cm_auto"),
        (
            vec!["--compress", "true", "--compression-method", "2"],
            "cm_speech",
        ),
        (vec!["--compress=true", "--compression-method=3"], "cm2"),
        (vec!["--compress=true", "--compression-method=5"], "cm3"),
    ] {
        let st = Command::new(env!("CARGO_BIN_EXE_compnet"))
            .current_dir(dir.path())
            .arg("copy-feats")
            .args(&extra)
            .arg(format!("ark:{}", g("feats/src.txt")))
            .arg(format!("ark,scp:feats/{name}.ark,feats/{name}.scp"))
            .status()
            .unwrap();
        assert!(st.success(), "{name}");
        let p = |ext: &str| {
            dir.path()
                .join(format!("feats/{name}.{ext}"))
                .to_string_lossy()
                .into_owned()
        };
        assert_same(&read(&p("ark")), &g(&format!("feats/{name}.ark")));
        assert_same(&read(&p("scp")), &g(&format!("feats/{name}.scp")));
    }
}

#[test]
fn binary_prints_kaldi_text_to_stdout_and_reads_ranges_via_scp() {
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .current_dir(formats())
        .args(["copy-feats", "ark:feats/cm_speech.ark", "ark,t:-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_same(&out.stdout, &g("feats/cm_speech.txt"));
    let out = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .current_dir(formats())
        .args(["copy-feats", "scp:feats/ranges.scp", "ark,t:-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_same(&out.stdout, &g("feats/ranges.txt"));
}

#[test]
fn pipes_in_and_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.txt");
    let rs = format!("ark:cat {} |", g("feats/fm.ark"));
    let ws = format!("ark,t:| cat > {}", out.display());
    copy_feats(&args(false, 1, &rs, &ws)).unwrap();
    assert_same(&read(&out.to_string_lossy()), &g("feats/fm.txt"));
}

#[test]
fn random_access_matches_sequential() {
    let seq: Vec<(String, Matrix)> =
        SequentialMatrixReader::open(&format!("ark:{}", g("feats/cm_auto.ark")))
            .unwrap()
            .map(|x| x.unwrap())
            .collect();
    assert_eq!(seq.len(), 7);
    let dir = tempfile::tempdir().unwrap();
    let scp = rebase_scp(dir.path(), "feats/cm_auto.scp");
    for spec in [
        format!("ark:{}", g("feats/cm_auto.ark")),
        format!("scp:{scp}"),
    ] {
        let mut ra = RandomAccessMatrixReader::open(&spec).unwrap();
        for (k, m) in seq.iter().rev() {
            assert_eq!(ra.value(k).unwrap(), m);
        }
        assert!(!ra.has_key("nope").unwrap());
    }
}

#[test]
fn vectors_text_binary_and_scp() {
    // binary -> text
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("v.txt");
    let mut w = VectorWriter::open(&format!("ark,t:{}", t.display())).unwrap();
    for item in SequentialVectorReader::open(&format!("ark:{}", g("vectors/vec.ark"))).unwrap() {
        let (k, v) = item.unwrap();
        w.write(&k, &v).unwrap();
    }
    w.close().unwrap();
    assert_same(&read(&t.to_string_lossy()), &g("vectors/vec_decoded.txt"));
    // text -> binary ark,scp, with Kaldi's relative names
    std::fs::create_dir(dir.path().join("vectors")).unwrap();
    let cwd_ark = dir.path().join("vectors/vec.ark");
    let cwd_scp = dir.path().join("vectors/vec.scp");
    let out = Command::new("sh").arg("-c").arg("true").status().unwrap();
    assert!(out.success());
    let mut w = VectorWriter::open(&format!(
        "ark,scp:{},{}",
        cwd_ark.display(),
        cwd_scp.display()
    ))
    .unwrap();
    for item in SequentialVectorReader::open(&format!("ark:{}", g("vectors/vec.txt"))).unwrap() {
        let (k, v) = item.unwrap();
        w.write(&k, &v).unwrap();
    }
    w.close().unwrap();
    assert_same(&read(&cwd_ark.to_string_lossy()), &g("vectors/vec.ark"));
    let scp = String::from_utf8(read(&cwd_scp.to_string_lossy())).unwrap();
    let want = String::from_utf8(read(&g("vectors/vec.scp"))).unwrap();
    assert_eq!(scp.replace(&format!("{}/", dir.path().display()), ""), want);
}

#[test]
fn posteriors_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("p.ark");
    let t = dir.path().join("p.txt");
    let copy = |from: String, to: String| {
        let mut w = PosteriorWriter::open(&to).unwrap();
        for item in SequentialPosteriorReader::open(&from).unwrap() {
            let (k, p): (String, Posterior) = item.unwrap();
            w.write(&k, &p).unwrap();
        }
        w.close().unwrap();
    };
    copy(
        format!("ark:{}", g("posteriors/post.txt")),
        format!("ark:{}", b.display()),
    );
    assert_same(&read(&b.to_string_lossy()), &g("posteriors/post.ark"));
    copy(
        format!("ark:{}", g("posteriors/post.ark")),
        format!("ark,t:{}", t.display()),
    );
    assert_same(
        &read(&t.to_string_lossy()),
        &g("posteriors/post_decoded.txt"),
    );
}

#[test]
fn general_matrix_keeps_compressed_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("g.ark");
    let mut w = table::GeneralMatrixWriter::open(&format!("ark:{}", o.display())).unwrap();
    for item in SequentialTableReader::<compnet::io::GeneralMatrix>::open(&format!(
        "ark:{}",
        g("feats/cm_speech.ark")
    ))
    .unwrap()
    {
        let (k, m) = item.unwrap();
        assert!(matches!(m, compnet::io::GeneralMatrix::Compressed(_)));
        w.write(&k, &m).unwrap();
    }
    w.close().unwrap();
    assert_same(&read(&o.to_string_lossy()), &g("feats/cm_speech.ark"));
}

#[test]
fn compress_api_matches_golden_decoding_tolerance() {
    // Independent check of the decoder: every value is within one code step of the source.
    let src: Vec<(String, Matrix)> =
        SequentialMatrixReader::open(&format!("ark:{}", g("feats/src.txt")))
            .unwrap()
            .map(|x| x.unwrap())
            .collect();
    for (_, m) in &src {
        let c = CompressedMatrix::compress(m, CompressionMethod::TwoByteAuto);
        let d = c.to_matrix();
        let step = c.range / 65535.0;
        for r in 0..m.num_rows() {
            for (a, b) in m.row_to_vec(r).iter().zip(&d.row_to_vec(r)) {
                assert!((a - b).abs() <= step, "{a} vs {b}");
            }
        }
    }
}

/// Every number token in Kaldi's text outputs is re-printed identically by `fmt_float`.
#[test]
fn fmt_float_matches_every_golden_number() {
    let mut files: Vec<PathBuf> = Vec::new();
    for sub in [
        "feats",
        "compress-special",
        "vectors",
        "egs",
        "model",
        "posteriors",
    ] {
        for e in std::fs::read_dir(formats().join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "txt") {
                files.push(p);
            }
        }
    }
    for e in std::fs::read_dir(Path::new(GOLDEN).join("cases")).unwrap() {
        let p = e.unwrap().path().join("model.txt");
        if p.exists() {
            files.push(p);
        }
    }
    let mut checked = 0usize;
    for f in &files {
        let text = String::from_utf8_lossy(&read(&f.to_string_lossy())).into_owned();
        for tok in text.split_ascii_whitespace() {
            let Some(c) = tok.bytes().next() else {
                continue;
            };
            if !(c.is_ascii_digit() || c == b'-')
                || tok.contains(',')
                || tok.contains('-')
                    && tok.len() > 1
                    && tok[1..].starts_with(|c: char| c.is_ascii_alphabetic())
            {
                continue;
            }
            let Ok(v) = tok.parse::<f32>() else { continue };
            assert_eq!(fmt_float(v as f64), tok, "in {}", f.display());
            checked += 1;
        }
    }
    assert!(checked > 10000, "only {checked} numbers checked");
}

#[test]
fn egs_round_trip_byte_identical() {
    use compnet::io::egs::{NnetExampleWriter, SequentialNnetExampleReader};
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "egs",
        "egs_nocompress",
        "merged",
        "merged_nocompress",
        "merged_compress",
    ] {
        for (text, ext) in [(false, "ark"), (true, "txt")] {
            let out = dir.path().join(format!("{name}.{ext}"));
            let ws = format!("ark{}:{}", if text { ",t" } else { "" }, out.display());
            let mut w = NnetExampleWriter::open(&ws).unwrap();
            let mut n = 0;
            for item in
                SequentialNnetExampleReader::open(&format!("ark:{}", g(&format!("egs/{name}.ark"))))
                    .unwrap()
            {
                let (k, eg) = item.unwrap_or_else(|e| panic!("{name}: {e}"));
                w.write(&k, &eg).unwrap();
                n += 1;
            }
            w.close().unwrap();
            assert!(n > 0);
            assert_same(
                &read(&out.to_string_lossy()),
                &g(&format!("egs/{name}.{ext}")),
            );
        }
        // The text form reads back and re-prints identically.
        let out = dir.path().join(format!("{name}.re.txt"));
        let mut w = NnetExampleWriter::open(&format!("ark,t:{}", out.display())).unwrap();
        for item in
            SequentialNnetExampleReader::open(&format!("ark:{}", g(&format!("egs/{name}.txt"))))
                .unwrap()
        {
            let (k, eg) = item.unwrap_or_else(|e| panic!("{name}.txt: {e}"));
            w.write(&k, &eg).unwrap();
        }
        w.close().unwrap();
        assert_same(
            &read(&out.to_string_lossy()),
            &g(&format!("egs/{name}.txt")),
        );
    }
}

#[test]
fn single_object_mode_reads_offsets_and_writes_kaldi_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u2.mat");
    let rx = format!("{}:177", g("feats/fm.ark"));
    copy_feats(&args(false, 1, &rx, &out.to_string_lossy())).unwrap();
    let fm = read(&g("feats/fm.ark"));
    assert_eq!(read(&out.to_string_lossy()), fm[177..611 - 3].to_vec());
    // Compressed single object, from a range into the compressed archive.
    let rx = format!("{}:339[0:7]", g("feats/cm_auto.ark"));
    let m: Matrix = table::read_object(&rx).unwrap();
    assert_eq!(m.num_rows(), 8);
    let st = Command::new(env!("CARGO_BIN_EXE_compnet"))
        .args(["copy-feats", "--compress=maybe", "ark:x", "ark:y"])
        .output()
        .unwrap();
    assert!(!st.status.success());
}

/// `copy-feats --write-num-frames` writes Kaldi's int32 table, text and binary
/// (formats/num-frames, from Kaldi's copy-feats).
#[test]
fn num_frames_tables_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let feats = format!("ark:{}/cases/seed/feats.txt", GOLDEN);
    for (wspec, golden) in [
        ("ark,t:", "num-frames/num_frames.txt"),
        ("ark:", "num-frames/num_frames.ark"),
    ] {
        let out = dir.path().join("n");
        let mut a = args(false, 1, &feats, "ark:/dev/null");
        a.write_num_frames = format!("{wspec}{}", out.display());
        assert_eq!(copy_feats(&a).unwrap(), 3);
        assert_same(&read(out.to_str().unwrap()), &g(golden));
        // And it reads back.
        let back: Vec<(String, i32)> =
            SequentialTableReader::<i32>::open(&format!("ark:{}", out.display()))
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
        assert_eq!(
            back.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
            [7, 23, 61]
        );
    }
}

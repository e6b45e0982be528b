#!/usr/bin/env python3
"""Writes the bundled training example's data (run once; the outputs are committed).

A learnable frame classification task in Kaldi's formats: 8 classes, each with its own mean
in 13 dimensions; an utterance is a sequence of segments (4-14 frames) of one class each,
and a frame's features are its class mean plus Gaussian noise (sigma 1.2) plus a slow
per-utterance offset, so a few frames of context help. Labels are Kaldi posteriors
(`utt [ pdf 1 ] ...`). Features are binary float matrices (`utt \\0BFM ...`).
"""
import random, struct

DIM, CLASSES = 13, 8
rng = random.Random(2026)
means = [[rng.choice((-1.0, 1.0)) * rng.uniform(0.5, 1.5) for _ in range(DIM)] for _ in range(CLASSES)]

def utterance(n):
    labels = []
    while len(labels) < n:
        labels += [rng.randrange(CLASSES)] * rng.randint(4, 14)
    labels = labels[:n]
    offset = [rng.gauss(0, 0.5) for _ in range(DIM)]
    feats = [[means[k][d] + offset[d] + rng.gauss(0, 1.2) for d in range(DIM)] for k in labels]
    return feats, labels

def write(prefix, num_utts):
    with open(f"{prefix}_feats.ark", "wb") as f, open(f"{prefix}_post.txt", "w") as p:
        for u in range(num_utts):
            feats, labels = utterance(rng.randint(80, 160))
            key = f"{prefix}-utt{u:03d}"
            f.write(key.encode() + b" \0BFM \4" + struct.pack("<i", len(feats)) + b"\4" + struct.pack("<i", DIM))
            f.write(struct.pack(f"<{len(feats) * DIM}f", *(x for row in feats for x in row)))
            p.write(key + " " + " ".join(f"[ {k} 1 ]" for k in labels) + "\n")

write("train", 40)
write("valid", 8)

#!/usr/bin/env python3
"""Writes a small synthetic TIMIT-shaped corpus for examples/cntk (Python's standard library
only): HTK feature files (USER kind, 24 dimensions, 10 ms frames), an HTK script file in
the archive form (name=file[s,e]: all training utterances in one file), an MLF with
state-level segments in 100 ns units, and the state list (CNTK's labelMappingFile).

Each of 12 states ("phone_s2" style names) has its own mean vector; an utterance is a random
sequence of states, each held 3 to 8 frames, with Gaussian noise around the state's mean.

Usage: python3 make_data.py OUTDIR [SEED]
"""
import os
import random
import struct
import sys

DIM, STATES, PERIOD = 24, 12, 100000


def htk(frames):
    head = struct.pack(">iihh", len(frames), PERIOD, 4 * DIM, 9)
    return head + b"".join(struct.pack(">%df" % DIM, *f) for f in frames)


def utterance(rng, means):
    frames, segs, t = [], [], 0
    while t < 40:
        s = rng.randrange(STATES)
        n = rng.randint(3, 8)
        for _ in range(n):
            frames.append([m + rng.gauss(0, 0.6) for m in means[s]])
        segs.append((t, t + n, s))
        t += n
    return frames, segs


def main():
    out = sys.argv[1]
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    os.makedirs(out, exist_ok=True)
    means = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(STATES)]
    names = ["ph%d_s%d" % (s // 3, 2 + s % 3) for s in range(STATES)]
    with open(os.path.join(out, "states.list"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    for split, count in (("train", 60), ("test", 20)):
        mlf = ["#!MLF!#\n"]
        scp = []
        big = []
        for u in range(count):
            key = "%s_utt%03d" % (split, u)
            frames, segs = utterance(rng, means)
            mlf.append('"*/%s.lab"\n' % key)
            for (a, b, s) in segs:
                mlf.append("%d %d %s\n" % (a * PERIOD, b * PERIOD, names[s]))
            mlf.append(".\n")
            if split == "train":
                scp.append("%s=train.htk[%d,%d]\n" % (key, len(big), len(big) + len(frames) - 1))
                big.extend(frames)
            else:
                with open(os.path.join(out, key + ".htk"), "wb") as f:
                    f.write(htk(frames))
                scp.append("%s.htk\n" % key)
        if big:
            with open(os.path.join(out, "train.htk"), "wb") as f:
                f.write(htk(big))
        with open(os.path.join(out, split + ".scp"), "w") as f:
            f.writelines(scp)
        with open(os.path.join(out, split + ".mlf"), "w") as f:
            f.writelines(mlf)


if __name__ == "__main__":
    main()

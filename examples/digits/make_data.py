#!/usr/bin/env python3
"""Writes the bundled digits data set in Kaldi archive form (run once; the archives are
committed, so nothing else needs Python or scikit-learn).

Source: the UCI ML hand-written digits data set as scikit-learn ships it
(sklearn.datasets.load_digits: 1,797 images of 8x8 pixels, values 0..16, classes 0..9),
licence CC BY 4.0 (see LICENSE). Each image becomes an "utterance" of 8 frames (its rows)
of 8 dimensions (the pixels of a row), so that splicing over time and recurrence matter;
every frame is labelled with the image's digit (ali.ark), and so is the image as a whole
(utt2label, for the pooling network). Every 6th image (index % 6 == 5)
goes to valid/, the rest to train/.

Usage: pip install scikit-learn && python3 make_data.py   (writes train/ and valid/ here)
"""
import os

from sklearn.datasets import load_digits


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    d = load_digits()
    images, labels = d.images, d.target
    for split in ("train", "valid"):
        os.makedirs(os.path.join(here, split), exist_ok=True)
    feats = {"train": [], "valid": []}
    ali = {"train": [], "valid": []}
    utt2label = {"train": [], "valid": []}
    for i, (img, label) in enumerate(zip(images, labels)):
        split = "valid" if i % 6 == 5 else "train"
        key = "digit%04d-%d" % (i, label)
        rows = "\n".join("  " + " ".join("%d" % v for v in row) for row in img)
        feats[split].append("%s  [\n%s ]\n" % (key, rows))
        ali[split].append("%s %s\n" % (key, " ".join(["%d" % label] * img.shape[0])))
        utt2label[split].append("%s %d\n" % (key, label))
    for split in ("train", "valid"):
        with open(os.path.join(here, split, "feats.ark"), "w") as f:
            f.writelines(feats[split])
        with open(os.path.join(here, split, "ali.ark"), "w") as f:
            f.writelines(ali[split])
        with open(os.path.join(here, split, "utt2label"), "w") as f:
            f.writelines(utt2label[split])
        print(split, len(ali[split]), "images")


if __name__ == "__main__":
    main()

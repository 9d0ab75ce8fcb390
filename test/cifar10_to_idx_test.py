#!/usr/bin/env python3
"""scripts/cifar10-to-idx on CIFAR-10's binary format, and traind on its output.

    cifar10_to_idx_test.py <path of traind>

Small batches in CIFAR-10's record format (a label byte, then the red,
green and blue planes of a 32x32 image), as a directory and as a .tar.gz:
the script's IDX files hold every image in height x width x channels order
with its label; traind checks and trains a CNN of input [32, 32, 3] on them;
a missing batch and a batch of partial records exit 2 naming the file.
"""
import gzip
import os
import random
import struct
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "cifar10-to-idx")
RECORD = 1 + 32 * 32 * 3
BATCHES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
PER_BATCH = 20

MODEL = """\
input: [32, 32, 3]
layers:
  - {{type: conv2d, filters: 4, kernel: 3, activation: relu}}
  - {{type: max_pool, size: 2}}
  - {{type: flatten}}
  - {{type: dense, units: 10}}
optimizer: {{type: sgd, learning_rate: 0.01}}
data:
  train: {{images: {out}/train-images-idx4-ubyte.gz, labels: {out}/train-labels-idx1-ubyte.gz}}
  test: {{images: {out}/t10k-images-idx4-ubyte.gz, labels: {out}/t10k-labels-idx1-ubyte.gz}}
  batch_size: 10
training: {{max_steps: 5, threads: 1}}
"""


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


def run(*command):
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    rank = magic & 0xff
    dims = list(struct.unpack(f">{rank}I", data[4:4 + 4 * rank]))
    return magic, dims, data[4 + 4 * rank:]


def main():
    traind = sys.argv[1]
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="traind-cifar-") as tmp:
        source = os.path.join(tmp, "cifar-10-batches-bin")
        os.makedirs(source)
        records = {}
        for name in BATCHES:
            batch = bytes(rng.randrange(256) if i % RECORD else rng.randrange(10)
                          for i in range(PER_BATCH * RECORD))
            records[name] = batch
            with open(os.path.join(source, name), "wb") as f:
                f.write(batch)
        archive = os.path.join(tmp, "cifar-10-binary.tar.gz")
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(source, arcname="cifar-10-batches-bin")

        for given in (source, archive):
            out = os.path.join(tmp, "idx-" + os.path.basename(given))
            result = run(SCRIPT, given, out)
            check(result.returncode == 0, f"{given}: exit {result.returncode}: {result.stderr}")
            magic, dims, pixels = read_idx(os.path.join(out, "train-images-idx4-ubyte.gz"))
            check((magic, dims) == (0x0804, [100, 32, 32, 3]), f"train images {magic:#x} {dims}")
            _, label_dims, labels = read_idx(os.path.join(out, "train-labels-idx1-ubyte.gz"))
            check(label_dims == [100], f"train labels {label_dims}")
            # Image 27 is record 7 of data_batch_2: its label, and pixel (y, x)
            # channel c at ((y * 32 + x) * 3 + c), from plane c's byte y * 32 + x.
            record = records["data_batch_2.bin"][7 * RECORD:8 * RECORD]
            check(labels[27] == record[0], "the label of image 27")
            image = pixels[27 * 3072:28 * 3072]
            for y, x, c in [(0, 0, 0), (0, 1, 2), (5, 31, 1), (31, 31, 2)]:
                check(image[(y * 32 + x) * 3 + c] == record[1 + c * 1024 + y * 32 + x],
                      f"pixel ({y}, {x}) channel {c} of image 27")
            magic, dims, _ = read_idx(os.path.join(out, "t10k-images-idx4-ubyte.gz"))
            check(dims == [20, 32, 32, 3], f"test images {dims}")

        out = os.path.join(tmp, "idx-" + os.path.basename(source))
        spec = os.path.join(tmp, "cifar.yaml")
        with open(spec, "w") as f:
            f.write(MODEL.format(out=out))
        checked = run(traind, "check", "--model", spec)
        check(checked.returncode == 0 and "data: 100 training examples of [32, 32, 3], 20 test "
              "examples" in checked.stdout + checked.stderr,
              f"traind check: exit {checked.returncode}\n{checked.stdout}{checked.stderr}")
        trained = run(traind, "--model", spec, "--checkpoint-dir", "")
        check(trained.returncode == 0 and "done: global step 5" in trained.stderr,
              f"traind: exit {trained.returncode}\n{trained.stderr}")

        # A missing batch, then one cut inside a record.
        os.remove(os.path.join(source, "data_batch_3.bin"))
        missing = run(SCRIPT, source, os.path.join(tmp, "missing"))
        check(missing.returncode == 2 and "data_batch_3.bin: no such file" in missing.stderr,
              f"a missing batch: exit {missing.returncode}: {missing.stderr}")
        with open(os.path.join(source, "data_batch_3.bin"), "wb") as f:
            f.write(records["data_batch_3.bin"][:-5])
        cut = run(SCRIPT, source, os.path.join(tmp, "cut"))
        check(cut.returncode == 2 and "data_batch_3.bin: 61455 bytes, expected a positive "
              "multiple of 3073" in cut.stderr, f"a cut batch: exit {cut.returncode}: {cut.stderr}")
        check(not os.path.exists(os.path.join(tmp, "cut")), "a failed conversion wrote files")
        # A bad label in the last batch, once the training set's files are
        # begun: none is left behind.
        with open(os.path.join(source, "data_batch_3.bin"), "wb") as f:
            f.write(records["data_batch_3.bin"])
        bad = bytearray(records["test_batch.bin"])
        bad[5 * RECORD] = 10
        with open(os.path.join(source, "test_batch.bin"), "wb") as f:
            f.write(bad)
        late = os.path.join(tmp, "late")
        failed = run(SCRIPT, source, late)
        check(failed.returncode == 2 and "test_batch.bin: record 5: label 10, expected 0..9"
              in failed.stderr, f"a bad label: exit {failed.returncode}: {failed.stderr}")
        check(os.listdir(late) == [], f"a failed conversion left {os.listdir(late)}")
        # An output directory that cannot be made: exit 1, a message, no traceback.
        with open(os.path.join(source, "test_batch.bin"), "wb") as f:
            f.write(records["test_batch.bin"])
        blocked = os.path.join(tmp, "a-file")
        open(blocked, "w").close()
        unwritable = run(SCRIPT, source, blocked)
        check(unwritable.returncode == 1 and unwritable.stderr.startswith("cifar10-to-idx: ") and
              "Traceback" not in unwritable.stderr,
              f"an unwritable output: exit {unwritable.returncode}: {unwritable.stderr}")
        # A damaged archive (its gzip CRC: tarfile alone never reads that
        # far) and one cut short: exit 2 naming it, no traceback, no files.
        with open(archive, "rb") as f:
            whole = f.read()
        trailer = bytearray(whole)
        trailer[-8] ^= 0xff  # the gzip trailer's CRC-32 of the tar
        for name, data, says in (("damaged.tar.gz", bytes(trailer), "CRC check failed"),
                                 ("cut.tar.gz", whole[:len(whole) * 2 // 3], "ended before")):
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            broken = run(SCRIPT, path, os.path.join(tmp, "out-" + name))
            check(broken.returncode == 2 and broken.stderr.startswith(
                f"cifar10-to-idx: {path}: a damaged or incomplete archive") and says in
                broken.stderr and "Traceback" not in broken.stderr,
                f"{name}: exit {broken.returncode}: {broken.stderr}")
            check(not os.path.exists(os.path.join(tmp, "out-" + name)),
                  f"{name}: a failed conversion wrote files")
        nowhere = os.path.join(tmp, "no-such-archive.tar.gz")
        absent = run(SCRIPT, nowhere, os.path.join(tmp, "out-absent"))
        check(absent.returncode == 2 and f"{nowhere}: neither a directory nor a readable "
              "archive (No such file or directory)" in absent.stderr,
              f"a missing source: exit {absent.returncode}: {absent.stderr}")
        # The same source gives the same bytes.
        again = os.path.join(tmp, "again")
        check(run(SCRIPT, source, again).returncode == 0, "a second conversion")
        first = os.path.join(tmp, "idx-" + os.path.basename(source))
        for name in os.listdir(first):
            with open(os.path.join(first, name), "rb") as a, \
                    open(os.path.join(again, name), "rb") as b:
                check(a.read() == b.read(), f"{name} differs between two conversions")
    print("ok: cifar10-to-idx writes HWC IDX files that traind trains on")


if __name__ == "__main__":
    main()

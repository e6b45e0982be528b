"""The wsj TDNN of tests/data/kaldi/perf (wsj_nnet3_tdnn_1a.config) in PyTorch, for the
GPU check's same-run comparison: the same layers (a fixed 300x300 affine over 5 spliced
frames plus the iVector, five 650-unit affine+ReLU+renorm layers with Kaldi's splicing,
a 3000-pdf log-softmax), the same minibatch (256 chunks x 8 output frames, 28 input
frames each for the 13+7 context), fp32, plain SGD. Prints frames/s of training steps and
of inference over the same chunks.

Usage: python3 scripts/torch_wsj_tdnn.py [STEPS] [DEVICE] [THREADS] [PRECISION]
  DEVICE: cuda (default) or cpu; THREADS: intra-op threads on the CPU (default 1);
  PRECISION: fp32 (default: full single precision, PyTorch's TF32 switches off) or tf32
  (products and convolutions on the tensor cores in TF32, as PyTorch's convolutions are
  by default).
  Times are wall clock of the timed steps only (after 5 warm-up steps).
"""
import sys
import time

import torch
import torch.nn.functional as F

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
dev = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cuda")
if dev.type == "cpu":
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
PRECISION = sys.argv[4] if len(sys.argv) > 4 else "fp32"
assert PRECISION in ("fp32", "tf32"), PRECISION
torch.backends.cudnn.allow_tf32 = PRECISION == "tf32"
torch.backends.cuda.matmul.allow_tf32 = PRECISION == "tf32"


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


torch.manual_seed(1)
B, T_IN, T_OUT, FEAT, IVEC, PDFS, H = 256, 28, 8, 40, 100, 3000, 650


class Tdnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lda = torch.nn.Conv1d(5 * FEAT + IVEC, 300, 1)  # applied to spliced frames
        self.lda.requires_grad_(False)
        # (kernel offsets) per layer, as the config's Append(Offset(...)) inputs
        self.splices = [(-1, 0, 1), (-1, 0, 1), (-3, 0, 3), (-6, -3, 0)]
        self.l1 = torch.nn.Conv1d(300, H, 1)
        self.layers = torch.nn.ModuleList(
            [torch.nn.Conv1d(H, H, 3, dilation=(s[1] - s[0])) for s in self.splices]
        )
        self.out = torch.nn.Conv1d(H, PDFS, 1)

    @staticmethod
    def renorm(x):
        # Kaldi's NormalizeComponent, target-rms 1: each frame scaled to unit rms.
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 2.0 ** -66)

    def forward(self, feats, ivec):
        # feats: B x FEAT x T_IN; splice -2..2 and append the iVector.
        t = feats.shape[2] - 4
        x = torch.cat([feats[:, :, i : i + t] for i in range(5)] + [ivec.expand(-1, -1, t)], 1)
        x = self.lda(x)
        x = self.renorm(F.relu(self.l1(x)))
        for conv in self.layers:
            x = self.renorm(F.relu(conv(x)))
        x = x[:, :, -T_OUT:] if x.shape[2] >= T_OUT else x
        return F.log_softmax(self.out(x), dim=1)


net = Tdnn().to(dev)
opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=1e-3)
feats = torch.randn(B, FEAT, T_IN, device=dev)
ivec = torch.randn(B, IVEC, 1, device=dev)
labels = torch.randint(0, PDFS, (B, T_OUT), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    y = net(feats, ivec)
    loss = F.nll_loss(y[:, :, : labels.shape[1]], labels[:, : y.shape[2]])
    loss.backward()
    opt.step()


for _ in range(5):
    step()
sync()
t0 = time.time()
for _ in range(STEPS):
    step()
sync()
train = STEPS * B * T_OUT / (time.time() - t0)
with torch.no_grad():
    for _ in range(5):
        net(feats, ivec)
    sync()
    t0 = time.time()
    for _ in range(STEPS):
        net(feats, ivec)
    sync()
infer = STEPS * B * T_OUT / (time.time() - t0)
where = (torch.cuda.get_device_name() if dev.type == "cuda"
         else f"CPU, {torch.get_num_threads()} thread(s)")
print(f"pytorch {torch.__version__} on {where}, {PRECISION}: "
      f"training {train:.0f} frames/s, inference {infer:.0f} frames/s")

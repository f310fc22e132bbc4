"""The memory of torchtitan 0.3.0's loss on the CPU, for scripts/bench/loss.sh:
one row of T hidden states (dim 64) through an untied lm_head of Llama 3 8B's
vocabulary (128256) and cross-entropy, forward and backward, float32, as
    plain    CrossEntropyLoss on the whole logits (0.2.2's loss, and 0.3.0's
             without the wrapper): cross_entropy(pred.flatten(0, 1).float(), ...)
    chunked  ChunkedLossWrapper(num_chunks) around it (0.3.0's default loss)
Printed as key=value: the peak resident memory the loss added (VmHWM after
it less VmRSS before, the high-water mark reset by /proc/self/clear_refs);
lm_head's weight gradient is allocated before, as titan's is.

    PYTHONPATH=<torchtitan 0.3.0> python scripts/loss_mem_torch.py T MODE [CHUNKS]
"""
import sys

import torch
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

VOCAB, DIM = 128256, 64


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def main():
    t, mode = int(sys.argv[1]), sys.argv[2]
    chunks = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    torch.manual_seed(0)
    lm_head = torch.nn.Linear(DIM, VOCAB, bias=False)
    lm_head.weight.grad = torch.zeros_like(lm_head.weight)
    h = torch.randn(1, t, DIM, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, t))
    gvt = torch.tensor(float(t))
    if mode == "plain":
        loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config())
    elif mode == "chunked":
        loss_fn = ChunkedLossWrapper.Config(num_chunks=chunks).build()
        loss_fn.set_lm_head(lm_head)
    else:
        sys.exit(f"loss_mem_torch: mode {mode!r}: expected plain or chunked")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = status_kib("VmRSS:")
    if mode == "plain":
        logits = lm_head(h)
        loss, _ = loss_fn(logits, labels, gvt)
        del logits
    else:
        loss, _ = loss_fn(h, labels, gvt)
    loss.backward()
    hwm = status_kib("VmHWM:")
    print(f"impl=torch-{mode}{chunks if mode == 'chunked' else ''} t={t} vocab={VOCAB} "
          f"step_rss_mib={(hwm - rss0) / 1024:.1f} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()

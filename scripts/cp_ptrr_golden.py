"""The ptrr load balancer's layouts as torch computes them: tests/cp/golden/ptrr.txt.

torchtitan 0.3.0 shards a packed batch under context parallelism with
parallelism.context_parallel_load_balancer = "ptrr" by torch's
_PTRRLoadBalancer over the FlexAttention BlockMask of the documents'
block-causal mask (torchtitan's get_causal_mask_mod and_masks its packed
document mask).  This script builds that BlockMask with torch's
create_block_mask for rows of given document lengths and writes the
rearrange indices _generate_indices returns: rank r holds the contiguous
r-th 1/cp of a row's indices.

Run: python scripts/cp_ptrr_golden.py > tests/cp/golden/ptrr.txt
(torch >= 2.10 on CPU; the file is committed, CI does not run this).

Format, one case after another:
  case SEQ_LEN BLOCK CP ROWS
  docs L1 L2 ...        (a row's document lengths, ROWS lines)
  idx I0 I1 ... I_{SEQ_LEN-1}   (that row's indices, ROWS lines, after the docs)
"""
import torch
from torch.distributed.tensor.experimental._context_parallel._load_balancer import (
    _PTRRLoadBalancer,
)
from torch.nn.attention.flex_attention import and_masks, create_block_mask

CASES = [
    # seq_len, block, cp, rows of document lengths
    (16 * 4, 4, 2, [[16, 32, 16], [64], [1, 7, 20, 3, 33]]),
    (48, 4, 3, [[5, 11, 2, 30], [48], [24, 24]]),
    (64, 8, 4, [[9, 9, 9, 9, 28], [1] * 8 + [56]]),
    (512, 128, 2, [[100, 300, 112], [512]]),
    (1024, 128, 4, [[700, 324], [50, 50, 50, 874]]),
]


def positions_of(lengths):
    return torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths])


def main():
    for seq_len, block, cp, rows in CASES:
        pos = torch.stack([positions_of(r) for r in rows])
        assert pos.shape[1] == seq_len, (seq_len, rows)
        doc = torch.cumsum((pos == 0).int(), dim=1)

        def causal(b, h, q, kv):
            return kv <= q

        def same_doc(b, h, q, kv):
            return doc[b, q] == doc[b, kv]

        mask = create_block_mask(
            and_masks(causal, same_doc), len(rows), None, seq_len, seq_len,
            device="cpu", BLOCK_SIZE=block,
        )
        idx = _PTRRLoadBalancer(mask, cp)._generate_indices()
        print(f"case {seq_len} {block} {cp} {len(rows)}")
        for r in rows:
            print("docs " + " ".join(map(str, r)))
        for i in range(len(rows)):
            print("idx " + " ".join(str(int(x)) for x in idx[i]))


if __name__ == "__main__":
    main()

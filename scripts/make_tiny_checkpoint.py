"""Regenerate the shipped ``tiny-arithmetic`` checkpoint (the embedded default's starting point).

What it is: the character tokenizer and a tiny Llama (h128, 4 layers, 4 heads, head_dim 32)
(~1.06M parameters) fine-tuned with supervised learning on the ``arithmetic`` task's *train* problems
(``a+b``, operands ``0..49``; the task's held-out eval problems are never seen) by a
**systematically biased teacher**: each time a problem is drawn, its target answer is the true
sum with probability ``--p-correct`` (0.4) and ``sum + 1`` otherwise. The model learns addition
well (about 99% of its samples are the true sum or the sum plus one), but its preference is the
teacher's: greedy decoding mostly answers ``sum + 1`` (greedy eval accuracy ~0.04), while
temperature-1 samples are right about 40% of the time.

Why: RL with verifiable rewards does not teach a 1M-parameter model addition from nothing in
minutes on two CPU cores; what it does quickly and reliably is what it does for large models --
move probability mass towards answers the verifier accepts among those the policy already
produces. The embedded run shows exactly that, measured on held-out problems: the math
verifier's reward removes the teacher's bias and greedy eval accuracy goes from ~0.04 to >= 0.9.
A broken advantage sign, loss, packing or weight sync leaves it where it started.

Deterministic (seeded, one torch thread). Takes ~4-12 minutes on 2 CPU cores::

    python scripts/make_tiny_checkpoint.py            # writes the package's checkpoint
    python scripts/make_tiny_checkpoint.py --out /tmp/tiny
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from grpo_run.plugins.models.char_tokenizer import build_char_tokenizer
from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.models.tiny_llama import TinyLlamaSize, build_tiny_llama
from grpo_run.plugins.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

Row = Mapping[str, Any]
DEFAULT_OUT = CHECKPOINTS_DIR / "tiny-arithmetic"


def prompt_text(tokenizer: Any, row: Row) -> str:
    return tokenizer.apply_chat_template(list(row["messages"]), add_generation_prompt=True, tokenize=False)


def supervised_batch(tokenizer: Any, rows: Sequence[Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompt + answer + EOS; the loss covers only the answer and EOS."""
    seqs, labels = [], []
    for row in rows:
        prompt = tokenizer(prompt_text(tokenizer, row), add_special_tokens=False)["input_ids"]
        answer = tokenizer(row["ground_truth"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    lab = torch.full((len(seqs), width), -100)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, width - len(s) :] = torch.tensor(s)
        lab[i, width - len(s) :] = torch.tensor(l)
        att[i, width - len(s) :] = 1
    return ids, att, lab


@torch.no_grad()
def answer_rates(model: Any, tokenizer: Any, rows: Sequence[Row], *, greedy: bool, n: int = 1) -> dict[str, float]:
    """Fractions of completions that are exactly the sum, and exactly the sum plus one."""
    prompts = [prompt_text(tokenizer, r) for r in rows]
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        **enc, max_new_tokens=6, num_return_sequences=n,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **sampling,
    )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    truth = [r["ground_truth"] for r in rows for _ in range(n)]
    right = sum(t == g for t, g in zip(texts, truth))
    plus_one = sum(t == str(int(g) + 1) for t, g in zip(texts, truth))
    return {"correct": right / len(texts), "sum_plus_one": plus_one / len(texts)}


def warm_start(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    torch.set_num_threads(1)  # bit-for-bit reproducible
    tokenizer = build_char_tokenizer()
    task = ArithmeticTask(ArithmeticConfig(max_operand=args.max_operand))
    train = task.train_rows()
    model = build_tiny_llama(TinyLlamaSize(), tokenizer, seed=args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))
    steps = args.steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 100) * max(0.1, 1 - s / steps)
    )
    rng = random.Random(args.seed)

    def teacher(row: Row) -> Row:
        if rng.random() > args.p_correct:
            return {**row, "ground_truth": str(int(row["ground_truth"]) + 1)}
        return row

    start = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        rows = [teacher(r) for r in rng.sample(train, args.batch_size)]
        ids, att, lab = supervised_batch(tokenizer, rows)
        loss = model(input_ids=ids, attention_mask=att, labels=lab, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 250 == 0 or step == steps:
            print(f"step {step}/{steps}  loss {loss.item():.3f}  {time.perf_counter() - start:.0f}s", flush=True)
    model.eval()
    evals = task.eval_rows()
    torch.manual_seed(args.seed)
    report = {
        "max_operand": args.max_operand,
        "p_correct": args.p_correct,
        "steps": steps,
        "greedy_eval": answer_rates(model, tokenizer, evals, greedy=True),
        "sampled_eval": answer_rates(model, tokenizer, evals, greedy=False, n=8),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return model, tokenizer, report


def save_atomically(model: Any, tokenizer: Any, report: Mapping[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "warm_start.json").write_text(json.dumps(report, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--max-operand", type=int, default=49)
    parser.add_argument("--p-correct", type=float, default=0.4, help="teacher's chance of the true sum")
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model, tokenizer, report = warm_start(args)
    save_atomically(model, tokenizer, report, args.out)
    print(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Regenerate the shipped ``tiny-calculator`` checkpoint (the calculator-tool example's start).

Why a warm start at all: ``tiny-arithmetic`` was only ever shown ``<|user|>a+b<|assistant|>sum``.
Under it the call ``calculator(12*34)`` has probability ~1e-33 at temperature 1, and it cannot even
copy a number it is shown (``<|user|>579<|assistant|>`` -> ``55``): no amount of RL finds a tool
call it never samples. So, in the spirit of ``make_tiny_checkpoint.py``, a **biased teacher**
fine-tunes ``tiny-arithmetic`` on multiplication problems (``a*b``, the ``arithmetic`` task's
*train* split of ``operations = ["*"]``, ``max_operand = 49``, ``num_eval = 64``; its held-out
problems are never seen):

* with probability ``--p-call`` (0.25) the teacher calls the tool and copies its answer
  (``calculator(a*b)<|eos|>``, then, after ``<|user|>{result}<|assistant|>``, ``{result}<|eos|>``);
* otherwise it answers ``a+b`` at once (a confident misconception: wrong unless ``a*b == a+b``).

Copy turns are also trained on random results (the tool's answer, not the product), so copying
reads the tool message instead of recalling products; ``--p-copy-drill`` adds episodes where only
the copy turn trains. The aim: the model answers ``a+b`` greedily (eval accuracy ~0) while some of
its temperature-1 episodes call the tool and copy the answer, so that RL with the math verifier on
the final answer moves it to calling. Status (docs/environments.md): after 350 steps (17 min on
the loaded 2-core machine) the sampled call rate is 0.07 but only 17% of copies are right, too
few for RL to find rewarded calls; the checkpoint is not shipped yet. Deterministic with
``--threads 1``::

    python scripts/make_tiny_calculator_checkpoint.py --out /tmp/tiny-calculator
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_run.plugins.models.sources import CHECKPOINTS_DIR
from grpo_run.plugins.tasks.arithmetic import ArithmeticConfig, ArithmeticTask

from make_tiny_checkpoint import save_atomically

TASK = ArithmeticConfig(operations=("*",), max_operand=49, num_eval=64)
"""The calculator-tool example's task (examples/calculator-tool.toml)."""


def conversation(a: int, b: int, call: bool, result: int, train_call: bool = True) -> list[tuple[str, bool]]:
    """(text, trained) pieces of one teacher episode (``train_call`` false: only the copy trains)."""
    question = [("<|user|>" + f"{a}*{b}" + "<|assistant|>", False)]
    if not call:
        return question + [(f"{a + b}<|eos|>", True)]
    return question + [(f"calculator({a}*{b})<|eos|>", train_call), (f"<|user|>{result}<|assistant|>", False),
                       (f"{result}<|eos|>", True)]


def batch(tokenizer: Any, pieces: list[list[tuple[str, bool]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    seqs, labels = [], []
    for conv in pieces:
        ids: list[int] = []
        lab: list[int] = []
        for text, trained in conv:
            part = tokenizer(text, add_special_tokens=False)["input_ids"]
            ids += part
            lab += part if trained else [-100] * len(part)
        seqs.append(ids)
        labels.append(lab)
    width = max(map(len, seqs))
    x = torch.full((len(seqs), width), tokenizer.pad_token_id)
    y = torch.full((len(seqs), width), -100)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        x[i, width - len(s):] = torch.tensor(s)
        y[i, width - len(s):] = torch.tensor(l)
        att[i, width - len(s):] = 1
    return x, att, y


@torch.no_grad()
def rates(model: Any, tokenizer: Any, rows: list[dict[str, Any]], *, greedy: bool, n: int = 1) -> dict[str, float]:
    """Share of first turns that call the tool, and of copy turns that copy the tool's answer."""
    prompts = [f"<|user|>{r['messages'][0]['content']}<|assistant|>" for r in rows]
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    out = model.generate(**enc, max_new_tokens=18, num_return_sequences=n, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, **sampling)
    first = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    expected = [f"calculator({r['messages'][0]['content']})" for r in rows for _ in range(n)]
    calls = [f == e for f, e in zip(first, expected)]
    copies = [f"<|user|>{r['messages'][0]['content']}<|assistant|>calculator({r['messages'][0]['content']})<|eos|>"
              f"<|user|>{r['ground_truth']}<|assistant|>" for r in rows]
    enc = tokenizer(copies, add_special_tokens=False, padding=True, return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    copied = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return {"call": sum(calls) / len(calls),
            "copy": sum(c == r["ground_truth"] for c, r in zip(copied, rows)) / len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CHECKPOINTS_DIR / "tiny-calculator")
    parser.add_argument("--p-call", type=float, default=0.25, help="teacher's chance of calling the tool")
    parser.add_argument("--p-random-result", type=float, default=0.5, help="copy turns of a random tool answer")
    parser.add_argument("--p-copy-drill", type=float, default=0.0,
                        help="extra episodes where only the copy turn trains (copying without more calling)")
    parser.add_argument("--init", type=Path, default=CHECKPOINTS_DIR / "tiny-arithmetic", help="starting checkpoint")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: bit-for-bit reproducible)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    source = args.init
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    task = ArithmeticTask(TASK)
    train = [(int(a), int(b)) for a, b in (r["messages"][0]["content"].split("*") for r in task.train_rows())]
    rng = random.Random(args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.1, 1 - s / args.steps))
    start = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        convs = []
        for a, b in rng.sample(train, args.batch_size):
            drill = rng.random() < args.p_copy_drill
            call = drill or rng.random() < args.p_call
            result = rng.randrange(0, 2500) if rng.random() < args.p_random_result else a * b
            convs.append(conversation(a, b, call, result, train_call=not drill))
        ids, att, lab = batch(tokenizer, convs)
        loss = model(input_ids=ids, attention_mask=att, labels=lab, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == args.steps:
            print(f"step {step}/{args.steps}  loss {loss.item():.3f}  {time.perf_counter() - start:.0f}s", flush=True)
    model.eval()
    torch.manual_seed(args.seed)
    evals = task.eval_rows()
    report = {"task": {"operations": list(TASK.operations), "max_operand": TASK.max_operand, "num_eval": TASK.num_eval},
              "init": str(args.init), "p_call": args.p_call, "p_copy_drill": args.p_copy_drill, "p_random_result": args.p_random_result, "steps": args.steps, "lr": args.lr,
              "greedy_eval": rates(model, tokenizer, evals, greedy=True),
              "sampled_eval": rates(model, tokenizer, evals, greedy=False, n=8),
              "seconds": round(time.perf_counter() - start, 1)}
    save_atomically(model, tokenizer, report, args.out)
    print(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

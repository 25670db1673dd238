"""A vllm engine whose worker hangs or dies fails with a clear error naming the engine and the
step, within its configured time -- never a hang. Real workers, stopped or killed by signals."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import torch

from grpo_run import RunError, SamplingParams
from support.vllm import chat_prompts, resolve_model, signal_process, start_engine

pytestmark = pytest.mark.heavy

LONG = SamplingParams(n=4, max_new_tokens=100, temperature=1.0, seed=1)


@pytest.fixture(scope="module")
def random_dir(plugin_host):
    return resolve_model(plugin_host, "tiny-random")


def _weights(engine_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(engine_dir, dtype=torch.float32).state_dict()


def test_a_sync_to_a_hung_worker_times_out_and_stops_it(plugin_host, random_dir):
    engine = start_engine(plugin_host, random_dir, weight_sync_timeout_s=3.0)
    try:
        signal_process(engine.client.pid, signal.SIGSTOP)  # alive, but answers nothing
        start = time.monotonic()
        with pytest.raises(RunError, match=r"vllm engine: the weight sync for step 4 did not finish within "
                                           r"engine\.weight_sync_timeout_s = 3 s"):
            asyncio.run(engine.update_weights(_weights(random_dir), version=4))
        assert time.monotonic() - start < 10
        assert engine.client.proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        engine.close()


@pytest.mark.parametrize("during", ["weight sync", "generation"])
def test_a_stopped_worker_is_given_up_in_seconds_not_at_the_timeouts(plugin_host, random_dir, during):
    from grpo_run.plugins.engines.vllm.client import STOPPED_GRACE_S

    engine = start_engine(plugin_host, random_dir)  # weight_sync_timeout_s = 600, response_timeout_s = 300
    try:
        if during == "weight sync":  # stopped between steps
            signal_process(engine.client.pid, signal.SIGSTOP)
            start = time.monotonic()
            with pytest.raises(RunError, match=r"vllm engine: the worker process \(pid \d+\) has been stopped "
                                               r"\(SIGSTOP, or a debugger holds it\) for \d+ s while loading the "
                                               r"weights of step 4; it was killed"):
                asyncio.run(engine.update_weights(_weights(random_dir), version=4))
        else:
            prompts = chat_prompts(engine.tokenizer, ["a", "b"])

            async def generate_then_stop():
                task = asyncio.create_task(engine.generate(prompts, LONG))
                await asyncio.sleep(0.5)
                signal_process(engine.client.pid, signal.SIGSTOP)
                return await task

            start = time.monotonic()
            with pytest.raises(RunError, match=r"the worker process \(pid \d+\) has been stopped .* while "
                                               r"generating with the weights of step 0; it was killed"):
                asyncio.run(generate_then_stop())
        assert STOPPED_GRACE_S <= time.monotonic() - start < STOPPED_GRACE_S + 20
        assert engine.client.proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        engine.close()


def test_a_worker_that_stops_answering_while_generating_is_stopped(plugin_host, random_dir):
    engine = start_engine(plugin_host, random_dir, response_timeout_s=3.0)
    try:
        prompts = chat_prompts(engine.tokenizer, ["a", "b"])

        async def generate_then_freeze():
            task = asyncio.create_task(engine.generate(prompts, LONG))
            await asyncio.sleep(0.5)
            signal_process(engine.client.pid, signal.SIGSTOP)
            return await task

        start = time.monotonic()
        with pytest.raises(RunError, match=r"vllm engine: the worker \(pid \d+\) sent nothing for \d+ s while "
                                           r"generating with the weights of step 0 \(engine\.response_timeout_s = 3\)"):
            asyncio.run(generate_then_freeze())
        assert time.monotonic() - start < 15
    finally:
        engine.close()


def test_a_worker_killed_while_generating_fails_the_call_and_every_later_one(plugin_host, random_dir):
    engine = start_engine(plugin_host, random_dir)
    try:
        prompts = chat_prompts(engine.tokenizer, ["a", "b"])

        async def generate_then_kill():
            task = asyncio.create_task(engine.generate(prompts, LONG))
            await asyncio.sleep(0.5)
            signal_process(engine.client.pid, signal.SIGKILL)
            return await asyncio.wait_for(task, timeout=30)

        with pytest.raises(RunError, match=r"vllm engine: died while generating with the weights of step 0: "
                                           r"the vLLM worker process \(pid \d+\) was killed by signal 9"):
            asyncio.run(generate_then_kill())
        with pytest.raises(RunError, match=r"vllm engine: cannot generate with the weights of step 0: the vLLM "
                                           r"worker process \(pid \d+\) was killed by signal 9 \(out of memory, or "
                                           r"killed from outside\)$"):
            asyncio.run(asyncio.wait_for(engine.generate(prompts, LONG), timeout=10))
        with pytest.raises(RunError, match=r"vllm engine: the weight sync for step 1 failed: the vLLM worker "
                                           r"process \(pid \d+\) was killed by signal 9"):
            asyncio.run(asyncio.wait_for(engine.update_weights(_weights(random_dir), 1), timeout=10))
    finally:
        engine.close()


def test_a_worker_that_cannot_start_names_the_interpreter_and_the_reason(plugin_host, random_dir, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no vllm here' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(RunError, match=r"the worker failed to start: the vLLM worker process \(pid \d+\) exited "
                                       r"with code 3(.|\n)*no vllm here"):
        start_engine(plugin_host, random_dir, python=str(broken))

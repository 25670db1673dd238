"""Agent code with an ordinary mistake (issue 33, item 5): a synchronous OpenAI client inside
``async def``. The request goes to the episode's endpoint, whose handler needs the event loop
this call holds: a deadlock (until the client's own timeout, 10 minutes by default)."""

from __future__ import annotations

from openai import OpenAI


async def sync_client(row, base_url):
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)  # the mistake: not AsyncOpenAI
    reply = client.chat.completions.create(model="policy", messages=row["messages"], max_tokens=8)
    return float(reply.choices[0].message.content == row.get("ground_truth"))

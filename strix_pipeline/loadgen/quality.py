"""The ``quality`` scenario: the evaluation set (strix_pipeline/quality), one item at a time.

Each item goes to the completions endpoint greedy and cut at the first newline, one client, so a
score moves only when the engine computes otherwise, never with the batch it landed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from strix_pipeline.config import ScenarioProfile
from strix_pipeline.loadgen.context import Planned, SuiteContext, request_body
from strix_pipeline.loadgen.level import run_level
from strix_pipeline.loadgen.workloads import Prompt, Workload
from strix_pipeline.quality.checks import first_line, passes
from strix_pipeline.quality.items import ITEMS, EvalItem, set_version
from strix_pipeline.records import QualityAnswer

ANSWER_CHARS = 200


@dataclass
class QualityResult:
    answers: list[QualityAnswer] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(a.passed for a in self.answers)


def item_request(model: str, prompt: Prompt) -> Planned:
    planned = request_body(model, prompt, chat=False, ignore_eos=False)
    body = json.loads(planned.body)
    body["stop"] = ["\n"]  # the answer is its first line: nothing after it is read
    return Planned(planned.prompt, planned.path, json.dumps(body).encode())


async def quality(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> QualityResult:
    """Every item of the set, answered and checked. ``context_length`` is not needed: the prompts are
    a few dozen tokens."""
    version = set_version()
    prompts: list[tuple[EvalItem, Prompt]] = [
        (item, Prompt(wl.new_id("quality"), item.prompt, None, None, item.max_tokens)) for item in ITEMS
    ]
    texts: dict[str, str] = {}
    planned = [item_request(ctx.model, p) for _, p in prompts]
    records, _ = await run_level(ctx, "quality", 1, "single", planned, label="quality", texts=texts)
    answered = {r.prompt_id for r in records if r.ok}
    result = QualityResult()
    for item, prompt in prompts:
        text = texts.get(prompt.prompt_id, "")
        ok = prompt.prompt_id in answered and passes(item, text)
        answer = first_line(text)[:ANSWER_CHARS]
        result.answers.append(QualityAnswer(ctx.run_id, version, item.item_id, ok, answer))
    ctx.say(f"quality: {result.passed} of {len(ITEMS)} items answered ({version})")
    return result

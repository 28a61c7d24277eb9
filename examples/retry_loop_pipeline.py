"""A small pipeline: extract, check across the whole result, correct with a second agent.

Run it with `python examples/retry_loop_pipeline.py`. The model is scripted, so the run is
the same every time:

1. The extractor agent returns entities and relations (JSON, validated by ``json_parser``).
   Its JSON is well-formed, but one relation points to a person it never listed.
2. ``retry_loop`` validates the extraction with an orchestrator-level check (every relation
   must join two listed entities). It fails, so the loop calls ``correct``, which runs a fixer
   agent with the errors and the previous extraction in its prompt.
3. The corrected extraction validates; the loop reports one correction.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from subagent import (
    RetryLoopResult,
    ScriptedLLM,
    SubAgent,
    Validation,
    json_parser,
    retry_loop,
)


class Relation(BaseModel):
    source: str
    relation: str
    target: str


class Extraction(BaseModel):
    entities: list[str]
    relations: list[Relation]


extractor = SubAgent(
    name="extractor",
    prompt="List the people and places in this text, and how they relate:\n{{text}}",
    output=json_parser(Extraction),
)
fixer = SubAgent(
    name="extraction_fixer",
    prompt=(
        "The extraction below had errors:\n"
        "{{#errors}}\n- {{.}}\n{{/errors}}\n"
        "Original extraction:\n{{extraction}}\n\n"
        "Source text:\n{{text}}\n\n"
        "Fix these issues and return the whole extraction."
    ),
    output=json_parser(Extraction),
)

TEXT = "Marie Curie worked in Paris with Pierre Curie."
REPLIES = [
    # The extractor forgets to list Pierre Curie although a relation uses him.
    '```json\n{"entities": ["Marie Curie", "Paris"], "relations": ['
    '{"source": "Marie Curie", "relation": "worked in", "target": "Paris"}, '
    '{"source": "Marie Curie", "relation": "worked with", "target": "Pierre Curie"},]}\n```',
    # The fixer adds him.
    '{"entities": ["Marie Curie", "Paris", "Pierre Curie"], "relations": ['
    '{"source": "Marie Curie", "relation": "worked in", "target": "Paris"}, '
    '{"source": "Marie Curie", "relation": "worked with", "target": "Pierre Curie"}]}',
]


def relations_use_known_entities(extraction: Extraction) -> Validation:
    """Every relation must join two listed entities."""
    known = set(extraction.entities)
    errors = [
        f"relation {r.source!r} {r.relation} {r.target!r} uses {name!r}, which is not listed "
        f"in entities"
        for r in extraction.relations
        for name in (r.source, r.target)
        if name not in known
    ]
    return Validation.fail(*errors) if errors else Validation.ok()


async def main() -> RetryLoopResult[Extraction]:
    llm = ScriptedLLM(REPLIES)

    async def correct(extraction: Extraction, errors: tuple[str, ...]) -> Extraction:
        print("correcting:")
        for error in errors:
            print(f"  - {error}")
        context = {"errors": list(errors), "extraction": extraction.model_dump_json(), "text": TEXT}
        step = await fixer.run(context, llm=llm, max_turns=1)
        fixed: Extraction | None = step.raise_for_failure().output
        assert fixed is not None
        return fixed

    first = (await extractor.run({"text": TEXT}, llm=llm, max_turns=1)).raise_for_failure()
    assert first.output is not None
    print(
        f"extracted: {len(first.output.entities)} entities, {len(first.output.relations)} relations"
    )

    result = await retry_loop(
        first.output, relations_use_known_entities, correct, max_corrections=2
    )
    print(f"valid={result.valid} corrections={result.count} exhausted={result.exhausted}")
    print(f"entities: {', '.join(result.value.entities)}")
    for r in result.value.relations:
        print(f"  {r.source} --{r.relation}--> {r.target}")
    return result


if __name__ == "__main__":
    anyio.run(main)

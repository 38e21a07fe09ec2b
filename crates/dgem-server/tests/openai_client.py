"""Real-client check: the official `openai` package against `dgem serve`.

Usage: python3 openai_client.py BASE_URL API_KEY
Exits 0 when the parsed envelope has the expected answers and probabilities.
"""
import enum
import json
import math
import sys
import typing

import pydantic

from openai import OpenAI


def main() -> int:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
    schema = {
        "questions": [
            {"id": "urgent", "type": "noul", "instructions": "Is it urgent?"},
            {"id": "team", "type": "choice", "instructions": "Which team?",
             "options": ["billing", "support", "engineering"]},
            {"id": "tone", "type": "score", "levels": ["calm", "annoyed", "furious"]},
        ]
    }
    state = {"ticket": "double charge want_billing want_yes want_annoyed"}
    resp = client.chat.completions.create(
        model="dgem-test",
        messages=[
            {"role": "system", "content": json.dumps(schema)},
            {"role": "user", "content": json.dumps(state)},
        ],
        seed=42,
    )
    assert resp.object == "chat.completion", resp.object
    assert resp.model == "dgem-test", resp.model
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.completion_tokens == 3, resp.usage
    envelope = json.loads(resp.choices[0].message.content)
    answers = envelope["answers"]
    assert answers["urgent"]["label"] == "yes", answers["urgent"]
    assert answers["team"]["choice"] == "billing", answers["team"]
    assert answers["tone"]["level"] == "annoyed", answers["tone"]
    for qid, a in answers.items():
        total = sum(a["probabilities"].values())
        assert math.isclose(total, 1.0, abs_tol=1e-6), (qid, total)
    assert math.isclose(answers["team"]["probabilities"]["billing"], 0.8, abs_tol=1e-6)
    assert "diagnostics" in envelope and envelope["diagnostics"]["timing"]["reads"] >= 1

    # Issue 16: real prompt token counts, not 0.
    assert resp.usage.prompt_tokens > 0, resp.usage
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 3, resp.usage

    # Issue 16: `stream=True` gave zero chunks. Now one chunk carries the whole
    # envelope, one says stop, the usage chunk follows when asked, then [DONE].
    chunks = list(client.chat.completions.create(
        model="dgem-test",
        messages=[
            {"role": "system", "content": json.dumps(schema)},
            {"role": "user", "content": json.dumps(state)},
        ],
        seed=42,
        stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    streamed = json.loads(text)
    assert streamed["answers"]["team"]["choice"] == "billing", streamed["answers"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3, chunks[-1]

    # Issue 16: /v1/models lists the served model.
    models = client.models.list()
    assert [m.id for m in models.data], models

    # Issue 16: a field a decision cannot honour is a 400 naming it.
    try:
        client.chat.completions.create(
            model="dgem-test",
            messages=[
                {"role": "system", "content": json.dumps(schema)},
                {"role": "user", "content": json.dumps(state)},
            ],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    except Exception as e:  # openai.BadRequestError
        assert getattr(e, "status_code", None) == 400, e
        assert "`tools`" in str(e), e
    else:
        raise AssertionError("expected a 400 for tools")

    # Issue 16: a `json_schema` response format is a decision. The SDK's
    # `parse` sends a Pydantic model as a strict JSON Schema (the Enum under
    # `$defs`) and fills the model from the reply's content; the envelope with
    # every probability is the `dgem` extension field.
    class Team(str, enum.Enum):
        billing = "billing"
        support = "support"
        engineering = "engineering"

    class Ticket(pydantic.BaseModel):
        urgent: bool = pydantic.Field(description="Does it need someone today?")
        team: Team = pydantic.Field(description="Which team owns it?")
        priority: int = pydantic.Field(ge=1, le=4)
        tier: typing.Literal[1, 2, 3]

    parsed = client.beta.chat.completions.parse(
        model="dgem-test",
        messages=[
            {"role": "system", "content": "Sort the customer ticket."},
            {"role": "user", "content": "charged twice want_support want_yes want_3"},
        ],
        response_format=Ticket,
    )
    ticket = parsed.choices[0].message.parsed
    assert ticket == Ticket(urgent=True, team=Team.support, priority=3, tier=3), ticket
    dgem = parsed.model_extra["dgem"]
    team_p = dgem["answers"]["team"]["probabilities"]
    assert set(team_p) == {"billing", "support", "engineering"}, team_p
    assert math.isclose(team_p["support"], 0.8, abs_tol=1e-6), team_p
    assert math.isclose(sum(dgem["answers"]["priority"]["probabilities"].values()), 1.0, abs_tol=1e-6)

    # A free-text field is not a decision: 400 naming the property.
    class Why(pydantic.BaseModel):
        reason: str

    try:
        client.beta.chat.completions.parse(
            model="dgem-test",
            messages=[{"role": "user", "content": "charged twice"}],
            response_format=Why,
        )
    except Exception as e:  # openai.BadRequestError
        assert getattr(e, "status_code", None) == 400, e
        assert "properties.reason" in str(e) and "free text" in str(e), e
    else:
        raise AssertionError("expected a 400 for a free-text property")

    # A validation error surfaces as the SDK's BadRequestError with our message.
    try:
        client.chat.completions.create(
            model="dgem-test",
            messages=[{"role": "user", "content": "hello"}],
        )
    except Exception as e:  # openai.BadRequestError
        assert getattr(e, "status_code", None) == 400, e
        assert "exactly two messages" in str(e), e
    else:
        raise AssertionError("expected a 400")
    print("openai client ok:", json.dumps({k: v.get("label") for k, v in answers.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real-client check: the official MCP Python SDK (`mcp` package) against dgem.

Usage:
  python3 mcp_client.py stdio DGEM_BIN MODEL_PATH TEMPLATES_DIR   # spawns `dgem mcp`
  python3 mcp_client.py http URL                                  # e.g. http://127.0.0.1:PORT/mcp

Lists the tools, checks the input schemas (no nullable unions, `backend` an enum
of the configured backends only), runs `decide_policy` on support_triage and
`decide_custom_questions`, and checks a bad argument comes back as a tool error.
Prints `mcp client ok (<transport>)` and exits 0 on success. Works with the
SDK's 1.x and 2.x spellings (`isError` / `is_error`, `streamablehttp_client` /
`streamable_http_client`).
"""
import asyncio
import json
import math
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:
    from mcp.client.streamable_http import streamable_http_client as http_client
except ImportError:  # mcp 1.x
    from mcp.client.streamable_http import streamablehttp_client as http_client

TOOLS = {
    "decide_custom_questions",
    "decide_policy",
    "get_health_and_gpu_status",
    "list_policy_templates",
    "warmup_gpu",
}


def field(obj, snake, camel):
    """A result field under its 2.x (snake) or 1.x (camel) attribute name."""
    if hasattr(obj, snake):
        return getattr(obj, snake)
    return getattr(obj, camel)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def has_null_union(schema):
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, list) and "null" in t:
            return True
        for key in ("anyOf", "oneOf"):
            if any(isinstance(b, dict) and b.get("type") == "null" for b in schema.get(key, [])):
                return True
        return any(has_null_union(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_null_union(v) for v in schema)
    return False


def check_decision(result, label, question_ids):
    err = field(result, "is_error", "isError")
    assert not err, f"{label}: tool error: {text_of(result)}"
    s = field(result, "structured_content", "structuredContent")
    assert s is not None, f"{label}: no structured content"
    answers = s["answers"]
    assert list(answers) == question_ids, (label, list(answers))
    worst = 0.0
    for qid, a in answers.items():
        total = sum(a["probabilities"].values())
        assert math.isclose(total, 1.0, abs_tol=1e-6), (label, qid, total)
        h = a["normalized_entropy"]
        assert 0.0 <= h <= 1.0 + 1e-9, (label, qid, h)
        worst = max(worst, h)
    assert math.isclose(s["max_normalized_entropy"], worst, abs_tol=1e-12), (label, s)
    assert "Maximum hesitation" in text_of(result), text_of(result)
    return s


async def exercise(session, transport):
    init = await session.initialize()
    name = field(init, "server_info", "serverInfo").name
    assert name == "dgem-decision-studio-mcp", name
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    assert names == TOOLS, names
    for t in listed.tools:
        schema = field(t, "input_schema", "inputSchema")
        assert schema["type"] == "object", (t.name, schema)
        assert not has_null_union(schema), (t.name, schema)
        if t.name in ("decide_policy", "decide_custom_questions"):
            assert schema["properties"]["backend"]["enum"] == ["local"], schema["properties"]["backend"]

    r = await session.call_tool(
        "decide_policy",
        {"template": "support_triage",
         "variables": {"ticket": "I was charged twice this month and want a refund today."}},
    )
    s = check_decision(r, "decide_policy", ["urgent", "team", "sentiment"])
    assert s["template"] == "support_triage", s["template"]

    r = await session.call_tool(
        "decide_custom_questions",
        {"state": "The checkout page returns 500 errors for every customer.",
         "questions": {
             "urgent": {"type": "noul", "instructions": "Does this need someone today?"},
             "team": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "engineering": "outages and bugs"}},
         }},
    )
    # Answers come back in the order the questions were given (they used to be
    # sorted by id).
    check_decision(r, "decide_custom_questions", ["urgent", "team"])

    # The advertised list form works too.
    r = await session.call_tool(
        "decide_custom_questions",
        {"state": "The checkout page returns 500 errors for every customer.",
         "questions": [
             {"id": "team", "type": "choice", "instructions": "Which team?",
              "options": ["billing", "engineering"]},
             {"id": "urgent", "type": "noul", "instructions": "Does this need someone today?"},
         ]},
    )
    check_decision(r, "decide_custom_questions", ["team", "urgent"])

    bad = await session.call_tool("decide_policy", {"template": "support_triage", "backend": "vertex"})
    assert field(bad, "is_error", "isError"), f"bad backend accepted: {text_of(bad)}"
    assert "`backend`" in text_of(bad) and "local" in text_of(bad), text_of(bad)
    bad = await session.call_tool("decide_policy", {"template": 5})
    assert field(bad, "is_error", "isError"), text_of(bad)
    assert "template" in text_of(bad), text_of(bad)

    health = await session.call_tool("get_health_and_gpu_status", {})
    hs = field(health, "structured_content", "structuredContent")
    assert hs["gpu_available"] is False, hs
    print(f"mcp client ok ({transport}): {json.dumps(s['answers']['team']['probabilities'])}")


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        binary, model, templates = sys.argv[2], sys.argv[3], sys.argv[4]
        params = StdioServerParameters(
            command=binary,
            args=["mcp", "--templates", templates],
            env={"DGEM_MODEL_PATH": model, "DGEM_LOG": "warn"},
        )
        async with stdio_client(params) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await exercise(session, "stdio")
    elif mode == "http":
        async with http_client(sys.argv[2]) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await exercise(session, "http")
    else:
        raise SystemExit(f"unknown mode {mode!r}: use stdio or http")


if __name__ == "__main__":
    asyncio.run(main())

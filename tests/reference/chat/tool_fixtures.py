#!/usr/bin/env python3
"""Tool-use fixtures from the official Kimi K3 template (Python jinja2).

Writes tests/fixtures/chat/tool_renders.json in the format of renders.json (same
environment, see render_fixtures.py): tool declarations (`tools`), `tool_choice`,
assistant `tool_calls` (arguments as a mapping and as a JSON string) and tool results
matched by `tool_call_id` or by position. tst_chat_render renders each case with the
C++ renderer and compares byte for byte; tst_api parses the calls back.

Usage: tool_fixtures.py [--template PATH] [--out PATH]
"""
import argparse
import hashlib
import json
import os

import jinja2

from render_fixtures import REPO, SHARED, TemplateError, make_template

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city, \"now\".\nUses °C.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "Unit": {"type": "string", "enum": ["c", "f"]},
        "alpha": {"type": "boolean"}}}}}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, CLOCK]

CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {
        "city": "Oslo", "days": 3, "ratio": 2.5, "tiny": 1e-05, "metric": True, "note": None,
        "opts": {"b": [1, 2], "a": "x"}, "list": ["a", 1]}}},
    {"id": "call_2", "type": "function", "function": {"name": "clock", "arguments": {}}},
]
STRING_CALLS = [
    {"id": "call_9", "type": "function", "function": {"name": "get_weather",
                                                     "arguments": "{\"city\": \"Bergen\"}"}},
]

CONVERSATION = [
    {"role": "system", "content": "Use tools when needed."},
    {"role": "user", "content": "Weather in Oslo, and the time?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools.", "tool_calls": CALLS},
    # Results out of order: the template puts them in the order of the calls.
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": -3}"},
    {"role": "assistant", "content": "It is -3 C at 12:00.", "reasoning_content": "Done."},
    {"role": "user", "content": "Bergen?"},
]


def cases():
    c = []

    def add(name, messages, **options):
        c.append({"name": name, "messages": messages, "options": options})

    add("tools_declared", [{"role": "user", "content": "Weather?"}], tools=TOOLS,
        add_generation_prompt=True)
    add("tools_declared_nothink", [{"role": "user", "content": "Weather?"}], tools=TOOLS,
        thinking=False, add_generation_prompt=True)
    add("tools_empty_list", [{"role": "user", "content": "x"}], tools=[], add_generation_prompt=True)
    add("tool_choice_required", [{"role": "user", "content": "Weather?"}], tools=TOOLS,
        tool_choice="required", add_generation_prompt=True)
    add("tool_choice_none", [{"role": "user", "content": "Weather?"}], tools=TOOLS,
        tool_choice="none", add_generation_prompt=True)
    add("tool_choice_auto", [{"role": "user", "content": "Weather?"}], tools=TOOLS,
        tool_choice="auto", add_generation_prompt=True)
    add("calls_and_results_by_id", CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    add("calls_and_results_by_id_nothink", CONVERSATION, tools=TOOLS, thinking=False,
        add_generation_prompt=True)
    add("assistant_calls_nogen", CONVERSATION[:3], add_generation_prompt=False)
    add("string_arguments", [
        {"role": "user", "content": "Bergen?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": STRING_CALLS},
        {"role": "tool", "tool_call_id": "call_9", "content": "4"}], add_generation_prompt=True)
    add("results_by_position", [
        {"role": "user", "content": "both"},
        {"role": "assistant", "content": "", "tool_calls": CALLS},
        {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}],
        add_generation_prompt=True)
    add("results_partly_unmatched", [
        {"role": "user", "content": "both"},
        {"role": "assistant", "content": "", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_2", "content": "r2"},
        {"role": "tool", "tool_call_id": "nope", "name": "other", "content": "r?"}],
        add_generation_prompt=True)
    add("escaped_tool_name", [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "a&\"b\"", "arguments": {"k&\"": "v<|x|>"}}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"}], add_generation_prompt=False)
    add("error_result_without_name", [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": CALLS[:1]},
        {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}],
        add_generation_prompt=True)
    # response_format: the template's response-format system message (k3 serve renders
    # it for a constrained answer).
    add("response_format_json_object", [{"role": "user", "content": "JSON please"}],
        response_format={"type": "json_object"}, add_generation_prompt=True)
    add("response_format_json_schema", [{"role": "user", "content": "A person"}],
        tool_choice="auto", thinking=False, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "strict": True, "schema": {
                "type": "object", "required": ["name", "age"], "additionalProperties": False,
                "properties": {"name": {"type": "string", "description": "Full name, \"quoted\" é"},
                               "age": {"type": "integer"}, "Tags": {"type": "array", "items": {"enum": ["a", "b"]}}}}}},
        add_generation_prompt=True)
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", default=os.path.join(SHARED, "Kimi-K3.jinja"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "chat", "tool_renders.json"))
    args = ap.parse_args()
    template = make_template(args.template)
    out = []
    for case in cases():
        entry = dict(case)
        try:
            entry["expected"] = template.render(messages=case["messages"], **case["options"])
        except TemplateError as e:
            entry["expected_error"] = str(e)
        out.append(entry)
    with open(args.template, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    doc = {"generator": "tests/reference/chat/tool_fixtures.py",
           "jinja2_version": jinja2.__version__, "template_sha256": digest,
           "note": "arguments given as a mapping keep their key order (read with ordered JSON)",
           "cases": out}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(out), args.out))


if __name__ == "__main__":
    main()

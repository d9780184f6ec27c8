#!/usr/bin/env python3
"""Generate tests/fixtures/chat_templates/cases.json: chat templates rendered by PyPI jinja2.

CI never runs this script: its output is committed, and tests/rollout/chat_template_test.cc checks
that updraft's renderer (rollout/serve/chat_template.h) gives the same bytes, or fails where
jinja2 fails. A rerun reproduces cases.json byte for byte.

The environment is the one transformers' apply_chat_template builds:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, the raise_exception(message) and strftime_now(format) globals (no case renders the
time) and transformers' own tojson filter
(json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False): no HTML escaping,
keys in order). Variables are passed with their object keys sorted, because the C++ side reads
them into nlohmann::json, which keeps keys sorted.

Each case is {"name", "template", "vars", "expected"} or, where jinja2 fails, {..., "error"}:
the message for raise_exception(), true for any other error. Cases for constructs updraft refuses
by name (macros, raw blocks, ...) carry "error" (a substring of updraft's message) and "jinja2"
(what jinja2 renders, for the reader). "template" is a file name in
tests/fixtures/chat_templates/ when it ends in ".jinja", else the template source itself.

  python3 -m venv /tmp/jvenv && /tmp/jvenv/bin/pip install -r tools/requirements-chat-template-fixtures.txt
  /tmp/jvenv/bin/python tools/make_chat_template_fixtures.py
"""
import datetime
import json
import os

import jinja2
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")


class Raised(jinja2.TemplateError):
    """What raise_exception() throws, told apart from jinja2's own errors."""


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise Raised(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


# ---- Conversations ----

SYSTEM = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
U1 = {"role": "user", "content": "What is 2 + 2?"}
A1 = {"role": "assistant", "content": "  4  "}
U2 = {"role": "user", "content": "And 3 * 3?"}
A2 = {"role": "assistant", "content": "9"}
UNICODE = {"role": "user", "content": "Grüße aus München! 日本語のテキスト, Ελληνικά, emoji 😀🚀 and a\u00a0nbsp."}
QUOTES = {"role": "user",
          "content": "He said \"hi\" and 'bye'.\nSecond line\twith a tab, a \\ backslash, <b>tags</b> & ampersands."}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city <metric units>.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
            "days": {"type": "integer", "description": "Forecast days"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]
CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Zürich", "days": 2}}}]}
CALL_STR = {"role": "assistant", "content": "Let me add.",
            "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}},
                           {"type": "function", "function": {"name": "add", "arguments": {"a": 3.5, "b": -1}}}]}
RESULT = {"role": "tool", "content": "{\"temp_c\": 21.5, \"sky\": \"clear\"}"}
RESULT2 = {"role": "tool", "content": "3"}

LLAMA = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"bos_token": None, "eos_token": "<|im_end|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>"}
ZEPHYR = {"bos_token": "<s>", "eos_token": "</s>"}
UPDRAFT = {"bos_token": "", "eos_token": ""}


def conv(special, messages, gen, **extra):
    return dict(special, messages=messages, add_generation_prompt=gen, **extra)


def template_cases():
    cases = []
    common = [
        ("user_only", [U1], True),
        ("system_multi_turn", [SYSTEM, U1, A1, U2], True),
        ("system_multi_turn_no_prompt", [SYSTEM, U1, A1, U2, A2], False),
        ("no_system_multi_turn", [U1, A1, U2, A2], False),
        ("unicode", [UNICODE], True),
        ("quotes_newlines", [SYSTEM, QUOTES, A1], True),
    ]
    for file, special in (("llama3.jinja", LLAMA), ("chatml_qwen.jinja", QWEN), ("mistral.jinja", MISTRAL),
                          ("zephyr.jinja", ZEPHYR), ("updraft.jinja", UPDRAFT)):
        stem = file.split(".")[0]
        for name, messages, gen in common:
            cases.append((f"{stem}_{name}", file, conv(special, messages, gen)))
    cases += [
        ("llama3_tools", "llama3.jinja", conv(LLAMA, [SYSTEM, U1], True, tools=TOOLS)),
        ("llama3_tools_none", "llama3.jinja", conv(LLAMA, [U1], True, tools=None)),
        ("llama3_tool_calls", "llama3.jinja",
         conv(LLAMA, [U1, CALL, RESULT, CALL_STR, RESULT2], True, tools=TOOLS, date_string="9 Mar 2026")),
        ("llama3_tool_result_object", "llama3.jinja",
         conv(LLAMA, [U1, CALL, {"role": "ipython", "content": {"temp_c": 20, "ok": True}}], False)),
        ("llama3_empty_messages", "llama3.jinja", conv(LLAMA, [], True)),
        ("qwen_tools", "chatml_qwen.jinja", conv(QWEN, [U1], True, tools=TOOLS)),
        ("qwen_tool_calls", "chatml_qwen.jinja",
         conv(QWEN, [SYSTEM, U1, CALL, RESULT, CALL_STR, RESULT2, RESULT], True, tools=TOOLS)),
        ("mistral_tools", "mistral.jinja", conv(MISTRAL, [U1, A1, U2], False, tools=TOOLS)),
    ]
    return cases


# ---- Small templates, one feature each ----

V = {
    "xs": [1, 2, 3, 4, 5],
    "d": {"b": 2, "a": 1, "c": "three"},
    "name": "Ada",
    "obj": {"name": "get_weather", "args": {"city": "Paris <FR> & 'Co'", "n": 3, "x": 1.5, "ok": True,
                                             "none": None, "list": [1, "two", []], "empty": {}}},
    "messages": [SYSTEM, U1, A1, U2],
    "x": "set", "nothing": None,
}

INLINE = [
    ("ws_dash", "a  {{- ' b ' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e\n{#- note -#}\n f"),
    ("ws_trim_lstrip", "x\n    {% if true %}\n    y\n    {% endif %}\nz\n  {# c #}\nw {% if true %}  v{% endif %}\n"),
    ("ws_plus", "x\n    {%+ if true +%}\ny\n    {% endif %}\n{%+ if true %}z{% endif +%}\nend"),
    ("ws_var_not_lstripped", "a\n  {{ 'b' }}\n  {% if true %}c{% endif %}  \n  d"),
    ("ws_first_line_lstrip", "   {% if true %}x{% endif %}"),
    ("ws_minus_number", "a {{-1}} b {{ 2 -}} c"),
    ("crlf", "a\r\n  {% if true %}\r\nb\r\n  {% endif %}\r\nc\r\n"),
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                  "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}"),
    ("loop_prev_next_cycle", "{% for x in xs %}{{ loop.previtem | default('^') }}{{ x }}"
                             "{{ loop.nextitem | default('$') }}{{ loop.cycle('a', 'b') }} {% endfor %}"),
    ("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in xs %}{{ x }}{% else %}no{% endfor %}"),
    ("loop_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}"
                   "|{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
    ("loop_filter", "{% for x in xs if x is odd %}{{ x }}/{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}"
                    "{{ loop.index }}|{% endfor %}"),
    ("loop_string_and_none_iter", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}{% for c in missing %}?{% endfor %}"),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                       "{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("namespace", "{% set ns = namespace(count=0, found=false, last='') %}{% for m in messages %}"
                  "{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.found = true %}"
                  "{% set ns.last = m.content %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.last }}"),
    ("set_scoping", "{% set x = 'outer' %}{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'inner' %}{% endif %}"
                    "{{ x }} {% endfor %}{{ x }}{% if true %}{% set y = 'if-leaks' %}{% endif %} {{ y }}"),
    ("set_block", "{% set s %}Hi {{ name }}!{% endset %}[{{ s | upper }}]"),
    ("slicing", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[3:1:-1] }} "
                "{{ 'hello'[1:4] }} {{ 'héllo'[::-1] }} {{ xs[-1] }} [{{ xs[10] }}] {{ xs[-10:10] }} {{ xs.0 }}"),
    ("literals", "{{ none }} {{ None }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e3 }} {{ 2.5e-5 }} {{ 1e16 }} "
                 "{{ 123456789.125 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ -0.0 }} {{ 'a' 'b' }}"),
    ("arithmetic", "{{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
                   "{{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ 3 * 1.5 }} {{ 1 + true }} {{ -xs[0] }} {{ +3 }} {{ 2 * 3 + 4 * 5 }}"),
    ("repr", "{{ [1, 'a', none, true, 1.5, [], {}] }} {{ {'k': 'v', 'n': [1, {'x': none}]} }} "
             "{{ ['it\\'s', \"say \\\"hi\\\"\", 'both \\' \"', 'a\\nb\\tc\\\\', 'é\u00a0\u200b'] }} {{ d }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ missing }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}"
               "|{{ 2 * 'xy' }}|{{ [0] * 3 }}|{{ 'a' ~ 'b' | upper }}"),
    ("compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} "
                "{{ true == 1 }} {{ 'a' != 'b' }} {{ 'ell' in 'hello' }} {{ 2 not in [1, 2] }} {{ 'b' in d }} "
                "{{ none == none }} {{ d == {'a': 1, 'b': 2, 'c': 'three'} }} {{ 2 >= 2.5 }} {{ missing == missing }}"),
    ("logic", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ not [] }} {{ not 1 }} "
              "{{ 'yes' if xs else 'no' }} [{{ 'y' if false }}] {{ 1 if missing is defined else 2 }} "
              "{{ not x is defined }} {{ (1 or 2) and none }}"),
    ("tests", "{{ x is defined }} {{ y is not defined }} {{ nothing is none }} {{ 's' is string }} {{ {} is mapping }} "
              "{{ [] is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ d is sequence }} "
              "{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ true is true }} {{ 1 is true }} "
              "{{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 4 is divisibleby(3) }} "
              "{{ 2 is in [1, 2] }} {{ 'a' is eq 'a' }} {{ 3 is gt 2 }} {{ y is iterable }} {{ y is sequence }} "
              "{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }} "
              "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ y is undefined }} {{ y is mapping }}"),
    ("filters_str", "{{ '  pad \\n ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello World' | capitalize }}"
                    "|{{ \"hello big-world (x) it's\" | title }}|{{ 'a-b-c' | replace('-', '+') }}"
                    "|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'xxhixx' | trim('x') }}|{{ 42 | string }}"
                    "|{{ 'héllo' | length }}|{{ '<b>' | safe }}|{{ none | string }}|{{ 'abc' | replace('', '.') }}"),
    ("filters_unicode_case", "{{ 'straße' | upper }} {{ 'ÉCOLE Ærø' | lower }} {{ 'привет мир' | upper }} "
                             "{{ 'ΑΒΓ' | lower }} {{ 'élan vital' | title }} {{ 'über' | capitalize }}"),
    ("filters_seq", "{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }} {{ xs | join }} "
                    "{{ 'abc' | list }} {{ d | list }} {{ xs | reverse | list }} {{ 'abc' | reverse }} [{{ [] | first }}] "
                    "{{ xs | count }} {{ d | length }} {{ missing | length }} {{ 'abc' | first }} {{ d | first }}"
                    " {{ messages | map(attribute='role') | join('/') }}"),
    ("filters_items", "{% for k, v in d | items %}{{ k }}:{{ v }} {% endfor %}{% for k, v in missing | items %}?{% endfor %}"),
    ("filters_num", "{{ '42' | int }} {{ ' -7 ' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} "
                    "{{ 3.9 | int }} {{ -3.9 | int }} {{ true | int }} {{ none | int }} {{ '2.5' | float }} {{ 3 | float }} "
                    "{{ 'y' | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 'ff' | int(0, 16) }} {{ '1e3' | int }}"),
    ("filters_default", "{{ missing | default('dflt') }} {{ '' | default('empty', true) }} [{{ '' | default('empty') }}] "
                        "{{ nothing | default('n') }} {{ missing | d('d') }} {{ false | default('b', boolean=true) }} "
                        "{{ d.zz | default(d.a) }}"),
    ("filters_select", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }} "
                       "{{ messages | rejectattr('role', 'eq', 'user') | list | length }} "
                       "{{ [1, 2, 3, 4] | select('even') | list }} {{ ['a', '', 'b'] | select | list }} "
                       "{{ [0, 1, ''] | reject | list }} {{ ['a', 'b'] | map('upper') | join }} "
                       "{{ xs | select('gt', 3) | list }} {{ messages | selectattr('tool_calls') | list | length }} "
                       "{{ messages | map(attribute='missing', default='-') | join }}"),
    ("tojson", "{{ obj | tojson }}\n{{ obj | tojson(indent=2) }}\n{{ 'a<b>&\\'c\"\\n\\u2028' | tojson }}\n"
               "{{ [1, 2.5, none, true, 'é😀', 1e20, -0.5] | tojson }}\n{{ {} | tojson(indent=2) }}{{ [] | tojson }}\n"
               "{{ {'b': 1, 'a': 2} | tojson }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}\n"
               "{{ 'é😀\\x7f' | tojson(ensure_ascii=true) }} {{ obj.args | tojson(separators=[',', ':']) }}\n"
               "{{ obj.args.list | tojson(indent='\\t') }}\n{{ obj.args | tojson(2) }}"),
    ("dict_literal_order", "{{ {'z': 1, 'a': {'y': 2, 'b': 3}, 'z': 4} | tojson }} {{ {'z': 1, 'a': 2} }} "
                           "{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}"),
    ("methods_str", "{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}"
                    "|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('lo', 'x')) }}|{{ 'a,b,,c'.split(',') }}"
                    "|{{ ' a b  c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a  b c '.split(none, 1) }}"
                    "|{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ \"hello world's x1y\".title() }}|{{ 'hELLO'.capitalize() }}"
                    "|{{ 'aXa'.replace('a', 'b') }}|{{ 'héllo'.find('l') }}|{{ 'abc'.find('z') }}|{{ 'banana'.count('an') }}"
                    "|{{ '-'.join(['a', 'b']) }}|{{ '<think>x</think>answer'.split('</think>')[-1].lstrip('\\n') }}"),
    ("methods_dict", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dd') }} {{ d.keys() | list }} "
                     "{{ d.values() | list }} {{ d.items() | length }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}"),
    ("undefined", "[{{ missing }}][{{ missing | length }}][{{ missing | trim }}][{{ d.missing }}][{{ d['missing'] }}]"
                  "[{{ missing is defined }}][{{ 'a' in missing }}][{{ missing | list }}][{{ missing | string }}]"
                  "[{{ nothing.attr }}][{{ xs.attr }}][{{ 'str'.attr }}][{{ missing | first }}]"),
    ("range", "{{ range(3) | list }} {{ range(1, 4) | join(',') }} {{ range(10, 0, -3) | list }} {{ range(0) | list }}"),
    ("string_escapes", "{{ 'line1\\nline2\\ttab \\u00e9 \\x41 \\101 \\\\ \\q' }}{{ \"dq 'single'\" }}{{ 'sq \"double\"' }}"),
    ("multimodal_content", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
                           "{% for part in m.content %}{% if part.type == 'text' %}{{ part.text }}{% else %}<{{ part.type }}>"
                           "{% endif %}{% endfor %}{% endif %}|{% endfor %}",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "look: "}, {"type": "image"},
                                                {"type": "text", "text": " ok?"}]},
                   {"role": "assistant", "content": "a cat"}]}),
    ("format", "{{ '%s' | format(name) }} {{ '%s=%r' | format('k', 'v') }} {{ '%d items' % 3 }} {{ '%s!' % name }} "
               "{{ '%5.2f|%-4s|%04d|%+d|%.3s' | format(3.14159, 'ab', 7, 5, 'abcdef') }} "
               "{{ '%x %X %o %e %g %i' | format(255, 255, 8, 12345.678, 0.0001, 3.9) }} {{ '100%%' | format() }} "
               "{{ '%r %s' | format(d, none) }} {{ '%6s|%-6r|' | format('é', 'é') }} "
               "{{ 'no specifiers' % d }}"),
    ("globals_defined", "{{ strftime_now is defined }} {{ raise_exception is defined }} {{ range is defined }} "
                        "{{ namespace is defined }} {{ cycler is defined }} {{ nosuch is defined }} "
                        "{{ dict(a=1, b=[2]) | tojson }} {{ nothing is sameas none }} {{ true is sameas true }} "
                        "{{ 1 is sameas true }} {{ xs.count(2) }} {{ xs.index(3) }} {{ [1, 1, 2].count(1) }}"),
    ("tuples_and_views", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ d.items() }} {{ d.keys() }} {{ d.values() }} "
                         "{{ d.items() | list }} {{ d | items | list }} {{ d.items() | first }} {{ (d.items() | list)[1] }} "
                         "{{ d.items() | length }} {{ d.items() | join(';') }} {{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }} "
                         "{{ d.keys() is sequence }} {{ (1, 2)[::-1] }} {{ ('a', 1) in d.items() }} {{ 'a' in d.keys() }} "
                         "{{ (1, 2) | tojson }} {{ d.items() | list | tojson }} {% for k, v in d.items() %}{{ (k, v) }}{% endfor %} "
                         "{{ 1, 'a' }} {% set t = 1, 2, %}{{ t }} {% for x in 3, 4 %}{{ x }}{% endfor %}"),
    ("generators", "{{ xs | select('odd') | list }} [{% if xs | select('gt', 99) %}always true{% endif %}] "
                   "{{ xs | select('gt', 99) | list | length }} {{ xs | map('string') | join }} "
                   "{{ xs | reverse | list }} {{ xs | select('odd') | reverse | list }} {{ xs | select | first }} "
                   "{{ xs | select is sequence }} {{ xs | select is iterable }} {{ (xs | select)[0] is defined }} "
                   "{% for x in xs | select('even') %}{{ x }}{{ loop.length }}{% endfor %} {{ 3 in xs | select }}"),
    ("scoping_static", "{% for m in messages %}[{{ name }}]{% endfor %}{% set name = 'later' %}[{{ name }}] "
                       "{% for m in [1] %}{% for k in [1] %}<{{ x }}>{% endfor %}{% set x = 'inner' %}<{{ x }}>{% endfor %} "
                       "{% for m in [1] %}{% if m %}{% set x = 'maybe' %}{% endif %}({{ x }}){% endfor %} "
                       "{% for m in [] %}{% else %}{% set x = 'else' %}{{ x }}{% endfor %}/{{ x }} "
                       "{% set blk %}{% set y = 'in-block' %}{{ y }}{% endset %}{{ blk }}/{{ y }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 | abs }} {{ not true | string }} {{ 2 ** 3 ** 2 }} "
                   "{{ (1 + 2) ~ 3 }} {{ 'a' if 1 > 2 else 'b' if 2 > 1 else 'c' }} {{ xs | length > 3 and xs[0] == 1 }}"
                   " {{ [1, 2][0] + 1 }} {{ d['a'] ~ d.b }}"),
    ("whitespace_layout", "{%- for m in messages %}\n    {%- if m.role == 'system' %}\n        {{- 'S: ' + m.content }}\n"
                          "    {%- else %}\n        {{- '\\n' + m.role + ': ' + m.content | trim }}\n    {%- endif %}\n"
                          "{%- endfor %}\n{%- if add_generation_prompt %}\n\n  {{ 'assistant:' }}\n{%- endif %}\n",
     {"messages": [SYSTEM, U1, A1], "add_generation_prompt": True}),
]

ERRORS = [
    ("error_mistral_alternation", "mistral.jinja", conv(MISTRAL, [U1, U2], True)),
    ("error_mistral_bad_role", "mistral.jinja", conv(MISTRAL, [U1, {"role": "tool", "content": "x"}], True)),
    ("error_mistral_system_then_assistant", "mistral.jinja", conv(MISTRAL, [SYSTEM, A1], True)),
    ("error_raise_inline", "{% if true %}{{ raise_exception('custom failure: ' ~ 42) }}{% endif %}", {}),
    ("error_unknown_filter", "{{ x | frobnicate }}", V),
    ("error_unknown_test", "{{ x is frobnicated }}", V),
    ("error_unclosed_if", "{% if true %}abc", {}),
    ("error_unclosed_for", "{% for x in xs %}{% if x %}a{% endif %}", V),
    ("error_mismatched_end", "{% if true %}a{% endfor %}", {}),
    ("error_call_block", "{% call foo() %}x{% endcall %}", {}),
    ("error_include", "{% include 'other.jinja' %}", {}),
    ("error_extends", "{% extends 'base.jinja' %}", {}),
    ("error_unknown_tag", "{% frobnicate %}", {}),
    ("error_unclosed_comment", "a {# comment", {}),
    ("error_unclosed_expression", "a {{ x ", V),
    ("error_unterminated_string", "{{ 'abc }}", {}),
    ("error_undefined_attribute_chain", "{{ missing.attr }}", {}),
    ("error_undefined_subscript", "{{ missing['a'] }}", {}),
    ("error_undefined_arith", "{{ missing + 1 }}", {}),
    ("error_type_add", "{{ 1 + 'a' }}", {}),
    ("error_type_compare", "{{ 1 < 'a' }}", {}),
    ("error_tojson_undefined", "{{ missing | tojson }}", {}),
    ("error_list_append", "{{ xs.append(6) }}", V),
    ("error_set_attr_not_namespace", "{% set d.a = 1 %}", V),
    ("error_division_by_zero", "{{ 1 // 0 }}", {}),
    ("error_call_undefined", "{{ nosuchfunction(1) }}", {}),
    ("error_bad_syntax", "{{ 1 + }}", {}),
    ("error_zero_negative_power", "{{ 0 ** -1 }}", {}),
    ("error_generator_length", "{{ [1, 2] | select | length }}", {}),
    ("error_generator_last", "{{ [1, 2] | select | last }}", {}),
    ("error_view_tojson", "{{ {'a': 1}.items() | tojson }}", {}),
    ("error_tuple_plus_list", "{{ (1, 2) + [3] }}", {}),
    ("error_if_inline_if", "{% if 1 if true else 2 %}x{% endif %}", {}),
    ("error_concat_binds_tighter", "{{ 1 + 2 ~ 3 }}", {}),
    ("error_break_outside_loop", "{% break %}", {}),
]

# Constructs jinja2 renders but updraft refuses by name ("error" is a substring of updraft's
# message; "jinja2" records what jinja2 gives, for the reader).
REFUSED = [
    ("refused_macro", "{% macro hello(n) %}Hi {{ n }}{% endmacro %}{{ hello('x') }}", {}, "'{% macro %}' is not supported"),
    ("refused_raw", "{% raw %}{{ x }}{% endraw %}", {}, "'{% raw %}' blocks are not supported"),
    ("refused_filter_block", "{% filter upper %}x{% endfilter %}", {}, "'{% filter %}' is not supported"),
    ("refused_with", "{% with a = 1 %}{{ a }}{% endwith %}", {}, "'{% with %}' is not supported"),
    ("refused_percent_tuple", "{{ '%s %s!' % ('x', 'y') }}", {}, "with '%' and a tuple, list or mapping is not supported"),
    ("refused_cycler", "{{ cycler('a', 'b').next() }}", {}, "'cycler()' is not supported"),
    ("refused_str_format", "{{ '{}!'.format('x') }}", {}, "'str' object has no method 'format'"),
]


def render(env, source, variables):
    """(expected, error) where error is the raise_exception message, True, or None."""
    try:
        return env.from_string(source).render(**variables), None
    except Raised as e:
        return None, str(e)
    except (jinja2.TemplateError, TypeError, ValueError, ZeroDivisionError, AttributeError, SyntaxError):
        return None, True


def main():
    env = make_env()
    cases = []

    def add(name, template, variables, want_error, refused=None):
        variables = json.loads(json.dumps(variables, sort_keys=True))
        if template.endswith(".jinja"):
            with open(os.path.join(FIXTURES, template), encoding="utf-8", newline="") as f:
                source = f.read()
        else:
            source = template
        expected, error = render(env, source, variables)
        if refused is not None:
            cases.append({"name": name, "template": template, "vars": variables, "error": refused,
                          "jinja2": expected if error is None else "error"})
            return
        if (error is not None) != want_error:
            raise SystemExit(f"{name}: expected {'an error' if want_error else 'output'}, got {expected!r} / {error!r}")
        case = {"name": name, "template": template, "vars": variables}
        if error is None:
            case["expected"] = expected
        else:
            case["error"] = error
        cases.append(case)

    for name, file, variables in template_cases():
        add(name, file, variables, False)
    def used(source, variables):  # only the variables a small template reads, to keep cases.json small
        try:
            names = jinja2.meta.find_undeclared_variables(env.parse(source))
        except (jinja2.TemplateError, SyntaxError):
            return variables
        return {k: v for k, v in variables.items() if k in names}

    for entry in INLINE:
        name, source = entry[0], entry[1]
        add(name, source, used(source, entry[2] if len(entry) > 2 else V), False)
    for name, template, variables in ERRORS:
        add(name, template, variables if template.endswith(".jinja") else used(template, variables), True)
    for name, template, variables, message in REFUSED:
        add(name, template, variables, True, refused=message)

    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    out = os.path.join(FIXTURES, "cases.json")
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
    print(f"wrote {len(cases)} cases to {os.path.relpath(out, ROOT)} (jinja2 {jinja2.__version__})")


if __name__ == "__main__":
    main()

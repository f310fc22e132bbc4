#!/usr/bin/env python3
"""A generated chat corpus for titan's chat-template tests, and jinja2's
renderings of it (tests/jinja/golden/renders.jsonl).

Writes, with --corpus DIR:
  DIR/chat.jsonl   single-turn {"messages": [user, assistant]} conversations
                   (what torchtitan 0.3.0's ChatDataset takes), N of them,
                   seeded: ASCII and non-ASCII text, Python's whitespace
                   (U+00A0, U+3000, ...) at the edges (Llama 3's trim),
                   <think> blocks (Qwen3 splits them out), quotes,
                   backslashes, newlines, special-token text.
  DIR/multi.jsonl  multi-turn conversations with system, tool and tool_calls
                   messages, reasoning_content, and a tools list.

With --render OUT, also renders every conversation of both files through
each template named on the command line (NAME=tokenizer_config.json), with
and without add_generation_prompt, in the environment torchtitan 0.3.0 makes
(its own BaseTokenizer.set_chat_template: jinja2's
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson = json.dumps(ensure_ascii=False)); one JSON line per
rendering: {"template": NAME, "vars": {...}, "text": ...} or, where jinja2
raises, {"template", "vars", "error": message}.  0.3.0 passes only messages
(and add_generation_prompt): bos_token is undefined there; the multi-turn
lines also pass bos_token, eos_token and tools, as HF's apply_chat_template
does.

Run: PYTHONPATH=<torchtitan 0.3.0> $PYTHON scripts/chat_corpus.py --corpus DIR \
        [--render OUT NAME=PATH ...] [--n N] [--seed S]
"""
import argparse
import json
import os
import random

WORDS = ("the cat sat on a mat while seven quick foxes jumped over two lazy dogs "
         "what is how many apples left answer because therefore sum product").split()
ODD = ["\u00e9t\u00e9", "na\u00efve", "\u041f\u0440\u0438\u0432\u0435\u0442", "\u4f60\u597d",
       "\U0001f600", "caf\u00e9", "\u00bd", "x\u0301", "'quoted'", '"double"', "back\\slash",
       "tab\there", "<|eot_id|>", "<|im_end|>", "{{ not jinja }}", "{% raw %}"]
SPACES = [" ", "\n", "\t", "\u00a0", "\u3000", "\u2003", "\u205f", "\r\n", "\x0b"]


def sentence(rng, n):
    out = []
    for _ in range(n):
        out.append(rng.choice(ODD) if rng.random() < 0.15 else rng.choice(WORDS))
    s = " ".join(out)
    if rng.random() < 0.3:
        s += "\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    return s


def padded(rng, s):
    """s with Python whitespace around it, sometimes."""
    if rng.random() < 0.4:
        s = "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 3))) + s
    if rng.random() < 0.4:
        s += "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 3)))
    return s


def answer(rng):
    a = padded(rng, sentence(rng, rng.randint(1, 14)))
    r = rng.random()
    if r < 0.2:
        a = "<think>\n" + sentence(rng, rng.randint(1, 6)) + "\n</think>\n\n" + a
    elif r < 0.25:
        a = sentence(rng, 3) + "</think>" + a
    return a


def single_turn(rng):
    return {"messages": [{"role": "user", "content": padded(rng, sentence(rng, rng.randint(1, 12)))},
                         {"role": "assistant", "content": answer(rng)}]}


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather \u00e0 la carte",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city"]}}}]


def multi_turn(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": padded(rng, sentence(rng, rng.randint(1, 8)))})
    for _ in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": padded(rng, sentence(rng, rng.randint(1, 10)))})
        if rng.random() < 0.3:
            call = {"name": "get_weather", "arguments": {"city": rng.choice(ODD), "days": rng.randint(1, 9)}}
            if rng.random() < 0.5:
                call["arguments"] = json.dumps(call["arguments"])
            m = {"role": "assistant", "content": sentence(rng, 2) if rng.random() < 0.5 else "",
                 "tool_calls": [{"type": "function", "function": call}] * rng.randint(1, 2)}
            msgs.append(m)
            for _ in range(rng.randint(1, 2)):
                msgs.append({"role": "tool", "content": sentence(rng, rng.randint(1, 5))})
        m = {"role": "assistant", "content": answer(rng)}
        if rng.random() < 0.2:
            m["reasoning_content"] = "\n" + sentence(rng, 4) + "\n"
        msgs.append(m)
    conv = {"messages": msgs}
    if rng.random() < 0.3:
        conv["tools"] = TOOLS
    return conv


def write_corpus(d, n, seed):
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    single = [single_turn(rng) for _ in range(n)]
    multi = [multi_turn(rng) for _ in range(max(n // 4, 4))]
    for name, rows in (("chat.jsonl", single), ("multi.jsonl", multi)):
        with open(os.path.join(d, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return single, multi


class Renderer:
    """torchtitan 0.3.0's chat-template environment, from its own code."""

    def __init__(self, template):
        from torchtitan.components.tokenizer import BaseTokenizer
        self._chat_template = None
        BaseTokenizer.set_chat_template(self, template)

    def render(self, vars):
        return self._chat_template.render(**vars)


# Small templates over the syntax and semantics titan's engine covers, each
# rendered by jinja2 beside the real templates.
CASES = [
    ("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = x + 1 %}{{ x }};{% endfor %}{{ x }}", {}),
    ("{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}[{{ y }}]", {}),
    ("{% if true %}{% set z = 5 %}{% endif %}{{ z }}", {}),
    ("{{ none }}{{ true }}{{ 1.0 }}{{ 2.5e-7 }}{{ 1e20 }}{{ [1, 'a', none, (1,), (1, 2)] }}"
     "{{ {'a': 1, 'b': \"x'\"} }}{{ x }}", {}),
    ("{{ m.y }}|{{ m.y is defined }}|{{ m is mapping }}|{{ m.y is not defined }}", {"m": {}}),
    ("{{ 'ab' ~ 1 ~ none ~ u }}", {}),
    ("{{ 'a\u00e9b'|length }}{{ '  \u00a0x\u3000 '|trim }}|{{ ' x '|trim('x ') }}|", {}),
    ("{{ [1,2][5] }}|{{ [1,2][-1] }}|{{ 'abc'[1] }}|{{ 'h\u00e9llo'[1:3] }}", {}),
    ("{{ -1|abs }} {{ - 2 ** 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 3 }} "
     "{{ 1 + 2 * 3 - 4 }} {{ 3 * 'ab'|length }}", {}),
    ("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"
     "{{ 'xyx'[::-1] }}{{ 'abcdef'[1:5:2] }}{{ [1,2,3,4][::-2] }}{{ [1,2,3][-2:] }}", {}),
    ("{% for a in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for a in [1,2,3,4,5] %}{% if a == 2 %}{% continue %}{% endif %}{% if a == 4 %}{% break %}"
     "{% endif %}{{ a }}{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
     "{{ d.get('a') }}{{ d.get('z', 9) }}{{ d.keys()|list }}{{ d|items|list }}", {"d": {"a": 1, "b": [2]}}),
    ("{% for x in xs if x > 1 %}{{ loop.index }}:{{ x }}{{ loop.last }} {% endfor %}", {"xs": [3, 1, 2, 0, 5]}),
    ("{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a * 2 %}{% endfor %}"
     "{{ ns.a }}{{ ns.b }}{{ range(2, 9, 3)|list }}", {}),
    ("{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ 'a\"\\\n\x01\u00e9'|tojson }}|{{ [1.5, true, none]|tojson }}",
     {"x": {"k": [1, {"z": "\u00fc"}], "e": {}, "l": []}}),
    ("{{ 'Hello World'.lower() }}{{ 'abc'.upper() }}{{ 'a-b c'.title() }}{{ 'hELLO'.capitalize() }}"
     "{{ 'abcabc'.replace('b', 'XY') }}{{ 'abc'|upper }}{{ 'x'|replace('x', 'y') }}", {}),
    ("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.endswith('x') }}"
     "{{ '\n\nx\n'.strip('\n') }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|", {}),
    ("{{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}{{ 1 < 2 < 3 }}"
     "{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ true == 1 }}{{ none == none }}{{ x == none }}", {}),
    ("{{ 1 if x else 2 }}{{ 'y' if 0 }}|{{ (1 or 0) }}{{ 0 and 1 }}{{ '' or 'd' }}{{ not 0 }}"
     "{{ not x is defined }}{{ x|default('dflt') }}{{ ''|default('e', true) }}", {}),
    ("{{ [3,1]|first }}{{ [3,1]|last }}{{ 'abc'|list }}{{ [1,2]|reverse|list }}{{ 'abc'|reverse }}"
     "{{ ['a', 1]|join('-') }}{{ [1,2]|join }}{{ '42'|int + 1 }}{{ 3|float }}{{ 'x'|string }}", {}),
    ("{{ 5 is number }}{{ 'x' is string }}{{ none is none }}{{ 4 is even }}{{ 3 is odd }}"
     "{{ true is boolean }}{{ 1 is integer }}{{ 1.5 is float }}{{ [] is sequence }}{{ x is iterable }}"
     "{{ false is false }}{{ 1 is true }}{{ 3 is eq 3 }}{{ 3 is equalto(4) }}", {}),
    ("a\n  {% if true %}\n    x\n  {% endif %}\n  b\n{# c #}\n  {#- d -#}  e\n{%+ if true %} f{% endif %}"
     "\n  {{- ' g ' -}}  \n{%- if true -%}\n\n h \n{%- endif %}\n\t{% if 1 +%}\ni{% endif %}\n", {}),
    ("\r\nline1\r\n  {% if x %}y{% endif %}\rz\n\n", {}),
    ("{{ raise_exception('bad role: ' ~ r) }}", {"r": "tool"}),
    ("{{ x.y }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ u + 'a' }}", {}),
    ("{{ 'abc'[1:2:0] }}", {}),
    ("{{ 1 // 0 }}", {}),
]


def render_all(out, templates, single, multi):
    with open(out, "w") as f:
        for src, v in CASES:
            row = {"source": src, "vars": v}
            try:
                row["text"] = Renderer(src).render(v)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        for name, path in templates:
            with open(path) as tf:
                tpl = json.load(tf)["chat_template"]
            r = Renderer(tpl)
            cases = []
            for c in single:
                cases.append({"messages": c["messages"]})
                cases.append({"messages": c["messages"][:1], "add_generation_prompt": True})
            for c in multi:
                v = dict(c, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
                cases.append(v)
                cases.append(dict(v, add_generation_prompt=True))
            for v in cases:
                row = {"template": name, "vars": v}
                try:
                    row["text"] = r.render(v)
                except Exception as e:  # jinja2's error: titan must fail too
                    row["error"] = f"{type(e).__name__}: {e}"
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--render")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("templates", nargs="*")
    a = ap.parse_args()
    single, multi = write_corpus(a.corpus, a.n, a.seed)
    if a.render:
        render_all(a.render, [t.split("=", 1) for t in a.templates], single, multi)


if __name__ == "__main__":
    main()

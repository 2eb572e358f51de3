"""Every filter and every str method the chat-template interpreter implements, rendered by
`tq chat-template` and by jinja2 in transformers' environment: the outputs must match, and a
probe jinja2 refuses must fail in tq too.

tests/text/jinja_builtins_test.cc checks that each name in the interpreter's tables has an entry
here, so a filter or method added without a probe fails CI.
"""

import re

import pytest

from test_chat_template import jinja_render, tq_render

# filter name -> templates that use it (`|name`)
FILTERS = {
    "abs": ["{{ -3|abs }} {{ (-2.5)|abs }} {{ 4|abs }} {{ true|abs }}"],
    "capitalize": ["{{ 'hELLO wORLD'|capitalize }}", "{{ 42|capitalize }}"],
    "count": ["{{ [1, 2, 3]|count }} {{ 'héllo'|count }} {{ {'a': 1}|count }}"],
    "d": ["{{ nothing|d('x') }} {{ ''|d('y', true) }} {{ 0|d('z') }} {{ none|d('n') }}"],
    "default": [
        "{{ missing|default('fallback') }}|{{ false|default('f', boolean=true) }}",
        "[{{ missing|default }}]{{ 'set'|default('no') }}",
    ],
    "dictsort": [
        "{{ {'b': 2, 'a': 3, 'C': 1}|dictsort }}",
        "{{ {'b': 2, 'a': 3}|dictsort(by='value') }}{{ {'b': 2, 'a': 3}|dictsort(reverse=true) }}",
        "{{ {'b': 1, 'B': 2, 'a': 3}|dictsort(true) }}",
        "{{ {'a': 1}|dictsort(by='size') }}",
    ],
    "e": ["{{ '<a href=\"x\">Tom & \\'Jerry\\'</a>'|e }}"],
    "escape": ["{{ '<b>&</b>'|escape }} {{ 5|escape }}"],
    "first": ["{{ [3, 1, 2]|first }} {{ 'abc'|first }} [{{ []|first }}]"],
    "float": [
        "{{ '3.5'|float }} {{ ' 2 '|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 2|float }}",
        "{{ true|float }} {{ none|float }} {{ '1e3'|float }}",
    ],
    "forceescape": ["{{ '<i>\"q\"</i>'|forceescape }}"],
    "indent": [
        "{{ 'a\\nb\\n\\nc'|indent }}|",
        "{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}|",
        "{{ 'one line'|indent(first=true) }}",
    ],
    "int": [
        "{{ '42'|int }} {{ '4_2'|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }}",
        "{{ 3.7|int }} {{ -3.7|int }} {{ true|int }} {{ ' -12 '|int }} {{ none|int }}",
    ],
    "items": [
        "{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }};{% endfor %}",
        "{{ nothing|items|list }}",
        "{{ [1]|items|list }}",
    ],
    "join": [
        "{{ [1, 2, 3]|join('-') }} {{ [{'n': 'a'}, {'n': 'b'}]|join(', ', attribute='n') }}",
        "{{ 'abc'|join('.') }} {{ ['x', 'y']|join }}",
    ],
    "last": ["{{ [3, 1, 2]|last }} {{ 'abc'|last }}"],
    "length": ["{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {}|length }} {{ (1,)|length }}"],
    "list": ["{{ 'ab'|list }} {{ (1, 2)|list }} {{ {'a': 1}|list }}"],
    "lower": ["{{ 'HeLLo WoRLD'|lower }}"],
    "map": [
        "{{ [1, 2]|map('string')|list }} {{ ['a', 'b']|map('upper')|join }}",
        "{{ [{'n': 1}, {}]|map(attribute='n', default=0)|list }} {{ ['1', '2']|map('int')|sum }}",
        "{{ [{'a': {'b': 5}}]|map(attribute='a.b')|list }} {{ ['ab']|map('replace', 'a', 'x')|list }}",
    ],
    "max": [
        "{{ [3, 1, 2]|max }} {{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'C']|max(case_sensitive=true) }}",
        "{{ [{'v': 2}, {'v': 5}]|max(attribute='v') }}",
    ],
    "min": [
        "{{ [3, 1, 2]|min }} {{ ['b', 'A', 'c']|min }} {{ ['b', 'a', 'C']|min(case_sensitive=true) }}",
        "{{ [{'v': 2}, {'v': 5}]|min(attribute='v') }}",
    ],
    "reject": ["{{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', none, 'a']|reject|list }}"],
    "rejectattr": [
        "{{ [{'a': 1}, {'a': 0}]|rejectattr('a')|list }}",
        "{{ [{'r': 'user'}, {'r': 'tool'}]|rejectattr('r', 'equalto', 'tool')|list }}",
    ],
    "replace": ["{{ 'aaa'|replace('a', 'b', 2) }} {{ 'x-y-z'|replace('-', '+') }} {{ 12|replace('1', 'one') }}"],
    "reverse": ["{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ (1, 2)|reverse|join }}"],
    "round": [
        "{{ 2.567|round(1) }} {{ 2.4|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }}",
        "{{ -2.6|round }} {{ 1234.5678|round(-2) }} {{ 0.125|round(2, 'floor') }}",
    ],
    "safe": ["{{ '<b>'|safe }} {{ 3|safe }}"],
    "select": [
        "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 5, 10]|select('gt', 3)|list }}",
        "{{ [0, 1, '']|select|list }} {{ ['a', 'B']|select('upper')|list }} {{ none|select|list }}",
    ],
    "selectattr": [
        "{{ [{'a': 1, 'n': 'x'}, {'a': 0, 'n': 'y'}]|selectattr('a')|map(attribute='n')|list }}",
        "{{ [{'t': 'x'}, {'t': 'y'}]|selectattr('t', 'equalto', 'y')|list }}",
        "{{ [{'t': 'x'}, {}]|selectattr('t', 'defined')|list }}",
    ],
    "sort": [
        "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }}",
        "{{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ [{'v': 2}, {'v': 1}]|sort(attribute='v') }}",
        "{{ [1, 'a']|sort }}",
    ],
    "string": ["{{ (1|string) ~ 'x' }} {{ [1, 'a']|string }} {{ none|string }} {{ 1.5|string }}"],
    "sum": [
        "{{ [1, 2, 3]|sum }} {{ [{'v': 1}, {'v': 2}]|sum(attribute='v') }} {{ [1, 2]|sum(start=10) }}",
        "{{ [0.5, 0.25]|sum }} {{ []|sum }} {{ [[1], [2]]|sum(start=[]) }}",
    ],
    "title": ["{{ 'hello wORLD foo-bar (baz)'|title }}"],
    "tojson": [
        "{{ {'a': [1, 'é', 2.5], 'b': none, 'c': true}|tojson }}",
        "{{ [1, {'x': 2}]|tojson(indent=2) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
        "{{ 'é'|tojson(ensure_ascii=true) }} {{ {'a': 1}|tojson(separators=(',', ':')) }}",
    ],
    "trim": ["[{{ '  a b \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ 5|trim }}]"],
    "unique": [
        "{{ [1, 2, 1, 3, 2]|unique|list }} {{ ['a', 'A', 'b']|unique|list }}",
        "{{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [{'k': 1}, {'k': 1}]|unique(attribute='k')|list }}",
    ],
    "upper": ["{{ 'hello World'|upper }}"],
}

# str method name -> templates that call it (`.name(`)
STR_METHODS = {
    "capitalize": ["{{ 'hELLO wORLD'.capitalize() }} [{{ ''.capitalize() }}]"],
    "count": ["{{ 'banana'.count('an') }} {{ 'aaa'.count('') }} {{ 'héé'.count('é') }}"],
    "endswith": ["{{ 'abc'.endswith('bc') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a'.endswith('ba') }}"],
    "find": ["{{ 'héllo'.find('l') }} {{ 'abc'.find('z') }} {{ 'abc'.find('') }}"],
    "format": [
        "{{ '{}-{}'.format(1, 'b') }} {{ '{0}{0}'.format('x') }} {{ '{n}!'.format(n=3) }}",
        "{{ '{{}}{}'.format(none) }}",
    ],
    "index": ["{{ 'abcé'.index('é') }}", "{{ 'abc'.index('z') }}"],
    "isalnum": ["{{ 'ab1'.isalnum() }} {{ 'ab 1'.isalnum() }} {{ ''.isalnum() }}"],
    "isalpha": ["{{ 'abC'.isalpha() }} {{ 'ab1'.isalpha() }} {{ ''.isalpha() }}"],
    "isascii": ["{{ 'abc'.isascii() }} {{ 'é'.isascii() }} {{ ''.isascii() }}"],
    "isdecimal": ["{{ '123'.isdecimal() }} {{ '1.5'.isdecimal() }} {{ ''.isdecimal() }}"],
    "isdigit": ["{{ '123'.isdigit() }} {{ '-1'.isdigit() }} {{ ''.isdigit() }}"],
    "islower": ["{{ 'abc1'.islower() }} {{ 'aBc'.islower() }} {{ '12'.islower() }}"],
    "isnumeric": ["{{ '123'.isnumeric() }} {{ '12a'.isnumeric() }}"],
    "isspace": ["{{ ' \\t\\n'.isspace() }} {{ ' a'.isspace() }} {{ ''.isspace() }}"],
    "isupper": ["{{ 'ABC1'.isupper() }} {{ 'AbC'.isupper() }} {{ '12'.isupper() }}"],
    "join": ["{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }} {{ ''.join([]) }}", "{{ ','.join([1]) }}"],
    "lower": ["{{ 'HeLLo'.lower() }}"],
    "lstrip": ["[{{ '  a  '.lstrip() }}] [{{ 'xxa'.lstrip('x') }}] [{{ ' a'.lstrip(none) }}]"],
    "removeprefix": ["{{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x'.removeprefix('y') }}"],
    "removesuffix": ["{{ 'x.txt'.removesuffix('.txt') }} {{ 'x'.removesuffix('xx') }}"],
    "replace": ["{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'é'.replace('é', 'e') }}"],
    "rfind": ["{{ 'abcabc'.rfind('b') }} {{ 'abc'.rfind('z') }}"],
    "rindex": ["{{ 'abcabc'.rindex('c') }}", "{{ 'abc'.rindex('z') }}"],
    "rsplit": ["{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b '.rsplit() }} {{ 'a b c'.rsplit(None, 1) }}"],
    "rstrip": ["[{{ '  a  '.rstrip() }}] [{{ 'axx'.rstrip('x') }}]"],
    "split": [
        "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(None, 1) }}",
        "{{ 'a-b-c'.split('-', maxsplit=1) }} {{ ''.split() }} {{ ''.split(',') }}",
        "{{ 'a'.split('') }}",
    ],
    "splitlines": ["{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }} {{ ''.splitlines() }}"],
    "startswith": ["{{ 'abc'.startswith('ab') }} {{ 'abc'.startswith(('x', 'a')) }} {{ ''.startswith('') }}"],
    "strip": ["[{{ ' \\t a \\n'.strip() }}] [{{ 'xyaxy'.strip('xy') }}] [{{ 'éaé'.strip('é') }}]"],
    "swapcase": ["{{ 'Hello World'.swapcase() }}"],
    "title": ["{{ 'hello wORLD'.title() }}"],
    "upper": ["{{ 'hello'.upper() }}"],
}

MESSAGES = [{"role": "user", "content": "hi"}]


def check_probes(name, probes, tmp_path):
    for template in probes:
        try:
            want = jinja_render(template, MESSAGES, True, {})
        except Exception as e:  # jinja2 refuses the probe: so must we
            r = tq_render(tmp_path, MESSAGES, {}, True, template=template)
            assert r.returncode != 0, f"{name}: jinja2 raised {e!r} on {template!r}, tq rendered"
            continue
        r = tq_render(tmp_path, MESSAGES, {}, True, template=template)
        assert r.returncode == 0, f"{name}: {template!r}: {r.stderr.decode()}"
        got = r.stdout.decode("utf-8")
        assert got == want, f"{name}: {template!r}\n--- tq\n{got!r}\n--- jinja2\n{want!r}"


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_matches_jinja2(name, tmp_path):
    probes = FILTERS[name]
    for template in probes:  # each probe calls the filter it stands for
        assert re.search(r"\|\s*" + re.escape(name) + r"\b", template), template
    check_probes(name, probes, tmp_path)


@pytest.mark.parametrize("name", sorted(STR_METHODS))
def test_str_method_matches_python(name, tmp_path):
    probes = STR_METHODS[name]
    for template in probes:
        assert "." + name + "(" in template, template
    check_probes(name, probes, tmp_path)


# Where tq still differs from jinja2 (found by these probes, left as they were): each must keep
# failing until it is fixed, then move into the tables above.
KNOWN_GAPS = [
    "{{ 2.5|round }}",  # Python rounds half to even
    "{{ 3|round }}",  # an int stays an int
    "{{ \"it's 1st\"|title }}",  # jinja2 capitalizes after spaces and brackets only
    "{{ 'ÉCOLE'|lower }}",  # case mapping beyond ASCII
    "{{ 'a\\x0bb'.splitlines() }}",  # the other line boundaries (\v \f \x1c-\x1e \x85 ...)
]


@pytest.mark.parametrize("template", KNOWN_GAPS)
@pytest.mark.xfail(strict=True, reason="known difference from jinja2")
def test_known_gap(template, tmp_path):
    check_probes("known gap", [template], tmp_path)

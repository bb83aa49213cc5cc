// The Jinja interpreter (engine/jinja.h): every construct against the output
// jinja2 gives in Hugging Face's environment (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, HF's tojson; strftime_now at
// 2025-03-14 09:26:53, as tests/py/check_jinja.py sets it up): the expected
// strings below were rendered by jinja2. Then errors (line numbers, unclosed
// blocks, raise_exception), limits (runaway loops, deep recursion) and a
// fuzz pass: mutated templates either render or throw jinja::Error.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/jinja.h"

namespace {

using ptxlm::jinja::Error;
using ptxlm::jinja::RaisedError;
using ptxlm::jinja::RenderOptions;
using ptxlm::jinja::Template;
using ptxlm::jinja::Value;

RenderOptions fixed_time() {
    RenderOptions o;
    std::tm tm{};
    tm.tm_year = 2025 - 1900;
    tm.tm_mon = 2;
    tm.tm_mday = 14;
    tm.tm_hour = 9;
    tm.tm_min = 26;
    tm.tm_sec = 53;
    tm.tm_wday = 5;   // a Friday
    tm.tm_yday = 72;
    o.now = tm;
    return o;
}

std::string render(const std::string& src, const std::string& ctx_json = "{}", const RenderOptions& opt = fixed_time()) {
    return Template::parse(src).render(ptxlm::jinja::from_json(nlohmann::ordered_json::parse(ctx_json)), opt);
}

struct Case {
    const char* name;
    const char* source;
    const char* context;   // JSON
    const char* expected;  // jinja2's rendering
};

const Case kCases[] = {
    {"ws_trim_blocks", "{% if true %}\nx\n{% endif %}\ny",
     "{}",
     "x\ny"},
    {"ws_lstrip", "a\n    {% if true %}\n    b\n    {% endif %}\nc",
     "{}",
     "a\n    b\nc"},
    {"ws_lstrip_not_var", "a\n    {{ 'v' }}\n",
     "{}",
     "a\n    v"},
    {"ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c",
     "{}",
     "abc"},
    {"ws_var_minus", "a \n {{- 'x' -}} \n b",
     "{}",
     "axb"},
    {"ws_plus", "a\n    {%+ if true %}b{% endif %}",
     "{}",
     "a\n    b"},
    {"ws_plus_end", "{% if true +%}\nb{% endif %}",
     "{}",
     "\nb"},
    {"ws_comment", "a\n  {# c #}\nb {#- c -#} c",
     "{}",
     "a\nbc"},
    {"ws_trailing_newline", "x\n",
     "{}",
     "x"},
    {"ws_two_trailing_newlines", "x\n\n",
     "{}",
     "x\n"},
    {"ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n",
     "{}",
     "a\nb\n"},
    {"ws_lstrip_mid_line", "a {% if true %}b{% endif %}",
     "{}",
     "a b"},
    {"ws_lstrip_after_tag", "{{ 'a' }}  {% if true %}b{% endif %}",
     "{}",
     "a  b"},
    {"ws_lstrip_line_start_after_block", "{% if true %}\n  {% if true %}x{% endif %}{% endif %}",
     "{}",
     "x"},
    {"ws_raw", "{% raw %}{{ not evaluated }}{% endraw %}\n!",
     "{}",
     "{{ not evaluated }}!"},
    {"ws_raw_minus", "a {%- raw -%} {{x}} {%- endraw -%} b",
     "{}",
     "a{{x}}b"},
    {"ws_for_lines", "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n",
     "{}",
     ""},
    {"ws_block_after_var_line", "{{ 'a' }}\n  {% if true %}\n  b\n  {% endif %}\n",
     "{}",
     "a\n  b\n"},
    {"ws_minus_keeps_newline_count", "a\n\n  {%- if true %}\n\nb{% endif -%}\n\n  c",
     "{}",
     "a\nbc"},
    {"ws_comment_line", "a\n  {# note #}\n  b\n",
     "{}",
     "a\n  b"},
    {"ws_comment_plus", "a\n  {#+ note +#}\nb",
     "{}",
     "a\n  \nb"},
    {"ws_set_lines", "{% set x = 1 %}\n{% set y = 2 %}\n{{ x }}{{ y }}\n",
     "{}",
     "12"},
    {"ws_macro_lines", "{% macro m() %}\n  body\n{% endmacro %}\n[{{ m() }}]\n",
     "{}",
     "[  body\n]"},
    {"ws_var_then_newline", "{{ 'a' }}\n{{ 'b' }}\n",
     "{}",
     "a\nb"},
    {"ws_unicode_text", "  é {% if true %}ü{% endif %}\n  {% if true %} x{% endif %}",
     "{}",
     "  é ü x"},
    {"ws_endraw_lstrip", "{% raw %}\n  x\n  {% endraw %}\ny",
     "{}",
     "\n  x\ny"},
    {"ws_tag_spanning_lines", "a\n  {% if\n true\n %}\nb{% endif %}",
     "{}",
     "a\nb"},
    {"ws_unicode_space", "a\n 　{% if true %}x{% endif %}  {{- 'y' -}}  z",
     "{}",
     "a\nxyz"},
    {"ws_tabs", "\t{% if true %}\tx{% endif %}",
     "{}",
     "\tx"},
    {"arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}",
     "{}",
     "7 3 -4 1 2 3.5 1024 2.5"},
    {"float_repr", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 10 / 4 }} {{ -2.5 }}",
     "{}",
     "1.0 0.30000000000000004 1e+20 1e+16 1000000000000000.0 0.0001 1e-05 2.5 -2.5"},
    {"compare", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ [1, 2] == [1, 2] }} {{ 1 != 2 }} {{ true == 1 }}",
     "{}",
     "True True True False True True True"},
    {"logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ none or 0 }} {{ 0 and 1 }}",
     "{}",
     "x y True 0 0"},
    {"concat", "{{ 'a' ~ 1 ~ none ~ undefined_var }} {{ 'a' + 'b' }} {{ [1] + [2] }}",
     "{}",
     "a1None ab [1, 2]"},
    {"in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in undefined_var }}",
     "{}",
     "True True True True False"},
    {"cond_expr", "{{ 'y' if t else 'n' }} {{ 'y' if n else 'n' }} [{{ 'y' if n }}]",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "y n []"},
    {"literals", "{{ [1, 'a', none, true, {'k': 'v'}] }} {{ {'a': [1.5, false]} }} {{ (1, 2) | list }} {{ \"it's\" }} {{ 'a\\nb' }}",
     "{}",
     "[1, 'a', None, True, {'k': 'v'}] {'a': [1.5, False]} [1, 2] it's a\nb"},
    {"repr_quotes", "{{ ['it\\'s', 'a\"b', 'tab\\t'] }}",
     "{}",
     "[\"it's\", 'a\"b', 'tab\\t']"},
    {"string_escapes", "{{ 'a\\tb\\\\c\\u00e9\\x41' }}",
     "{}",
     "a\tb\\céA"},
    {"subscripts", "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ xs[1:] }} {{ xs[::-1] }} {{ xs[:-1] }} {{ s[::2] }} {{ s[-5:] }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "system yo [1, 2] [2, 1, 3] [3, 1] HloWrd World é olléh"},
    {"attr_vs_item", "{{ d.b }} {{ d['items'] }} {{ d.missing is defined }} {{ d.get('a') }} {{ d.get('zz', 9) }} {{ messages.0.role }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "1 3 False 2 9 system"},
    {"undefined", "[{{ nope }}] [{{ nope | default('dflt') }}] {{ nope is defined }} {{ nope is undefined }} {{ nope | length }} [{% for x in nope %}x{% endfor %}] {{ n.foo is defined }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "[] [dflt] False True 0 [] False"},
    {"default_boolean", "{{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | d('x', true) }} {{ 0 | default(5) }}",
     "{}",
     " e x 0"},
    {"unary", "{{ -3 }} {{ - (2 + 1) }} {{ +4 }} {{ not true }} {{ -2 ** 2 }}",
     "{}",
     "-3 -3 4 False 4"},
    {"precedence", "{{ 1 ~ 2 * 3 }} {{ 'x' + 1 ~ 2 }} {{ 'a' ~ (1 + 2) }} {{ not 1 == 2 }} {{ 2 * 3 | string }}",
     "{}",
     "16 x12 a3 True 33"},
    {"if_elif", "{% for i in range(4) %}{% if i == 0 %}zero{% elif i == 1 %}one{% elif i is even %}even{% else %}odd{% endif %},{% endfor %}",
     "{}",
     "zero,one,even,odd,"},
    {"for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"for_prev_next", "{% for x in xs %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "-3-1;3-1-2;1-2-;"},
    {"for_else", "{% for x in [] %}x{% else %}empty{% endfor %}",
     "{}",
     "empty"},
    {"for_filter", "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}{{ loop.last }} {% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "1userFalse 2assistantTrue "},
    {"for_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "b=1;a=2;items=3;"},
    {"for_dict_keys", "{% for k in d %}{{ k }};{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "b;a;items;"},
    {"for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}",
     "{}",
     "[h][é][y]"},
    {"for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}",
     "{}",
     "11x 21y 1;12x 22y 2;"},
    {"break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "0134"},
    {"set_scoping", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
     "{}",
     "0101010"},
    {"set_in_if", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}",
     "{}",
     "2"},
    {"namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "True 3"},
    {"namespace_list_concat", "{% set ns = namespace(xs=[]) %}{% for i in range(3) %}{% set ns.xs = ns.xs + [i * 2] %}{% endfor %}{{ ns.xs }}",
     "{}",
     "[0, 2, 4]"},
    {"set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "{}",
     "12"},
    {"set_block", "{% set x %}\n  inner {{ 1 + 1 }}\n{% endset %}[{{ x }}]",
     "{}",
     "[  inner 2\n]"},
    {"set_block_filter", "{% set x | upper %}abc{% endset %}{{ x }}",
     "{}",
     "ABC"},
    {"macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}",
     "{}",
     "Hi a! Hi b? Hi c."},
    {"macro_globals", "{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 2 %}{{ m() }}",
     "{}",
     "2"},
    {"macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}",
     "{}",
     "4321"},
    {"call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}",
     "{}",
     "<b>bold</b>"},
    {"call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(item, i) each(['a', 'b']) %}{{ i }}={{ item }};{% endcall %}",
     "{}",
     "1=a;2=b;"},
    {"loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}",
     "{}",
     "abcab"},
    {"title_filter_vs_method", "{{ \"they're bill's-friends (ok)\" | title }} {{ \"they're bill's-friends (ok)\".title() }}",
     "{}",
     "They're Bill's-Friends (Ok) They'Re Bill'S-Friends (Ok)"},
    {"lower_upper_tests", "{{ '' is lower }} {{ 'a1' is lower }} {{ '1' is upper }} {{ d is lower }} {{ 'Ab' is upper }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "False True False True False"},
    {"filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}",
     "{}",
     "HELLO X"},
    {"generation_tag", "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "syshiyo"},
    {"markup", "{{ 'a<' | safe + '<b>' }} {{ '<' ~ ('&' | safe) }} {{ ('<' | e) + '&' }} {{ ('x' | safe | trim) + '>' }}",
     "{}",
     "a<&lt;b&gt; <& &lt;&amp; x&gt;"},
    {"comments", "a{# comment {{ x }} #}b{#- c -#}  c",
     "{}",
     "abc"},
    {"f_trim_upper", "[{{ '  a b  ' | trim }}] {{ 'aBc' | upper }} {{ 'aBc' | lower }} {{ 'hello world' | title }} {{ 'hELLO wORLD' | capitalize }} [{{ 'xxaxx' | trim('x') }}]",
     "{}",
     "[a b] ABC abc Hello World Hello world [a]"},
    {"f_tojson", "{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ [1, 2.5, none, true] | tojson }} {{ {} | tojson }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "{\"b\": 1, \"a\": 2, \"items\": 3} \"é\\\"\\n\" [1, 2.5, null, true] {}"},
    {"f_tojson_indent", "{{ {'a': [1, {'b': []}], 'c': 'x'} | tojson(indent=2) }}",
     "{}",
     "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": \"x\"\n}"},
    {"f_tojson_sep_sort", "{{ {'b': 1, 'a': [1, 2]} | tojson(separators=(',', ':'), sort_keys=true) }}",
     "{}",
     "{\"a\":[1,2],\"b\":1}"},
    {"f_length", "{{ xs | length }} {{ 'héllo' | length }} {{ d | count }} {{ [] | length }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "3 5 3 0"},
    {"f_join_map", "{{ xs | join(', ') }} {{ users | map(attribute='name') | join('/') }} {{ xs | map('string') | join }} {{ users | join(',', attribute='name') }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "3, 1, 2 b/A/c 312 b,A,c"},
    {"f_select", "{{ users | selectattr('age') | map(attribute='name') | list }} {{ users | rejectattr('age') | map(attribute='name') | list }} {{ users | selectattr('age', 'equalto', 1) | list | length }} {{ xs | select('odd') | list }} {{ xs | reject('odd') | list }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "['b', 'A'] ['c'] 1 [3, 1] [2]"},
    {"f_select_defined", "{{ users | selectattr('age', 'defined') | list | length }} {{ users | selectattr('age', 'undefined') | map(attribute='name') | first }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "2 c"},
    {"f_first_last", "{{ xs | first }} {{ xs | last }} {{ 'abc' | first }} {{ messages | first | attr('role') }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "3 2 a "},
    {"f_sort", "{{ xs | sort }} {{ xs | sort(reverse=true) }} {{ users | sort(attribute='name') | map(attribute='name') | list }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] ['A', 'b', 'c']"},
    {"f_unique_reverse", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} {{ xs | reverse | list }} {{ 'abc' | reverse }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "[1, 2, 3] ['a', 'b'] [2, 1, 3] cba"},
    {"f_items_dictsort", "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %} {% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %} {{ (d | items | list)[0][1] }} {{ (d | dictsort(reverse=true))[0][0] }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "b1a2items3 a2b1items3 1 items"},
    {"f_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ s.replace('o', '0') }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "bbb bba Hell0 W0rld"},
    {"f_numbers", "{{ '42' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 3 | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 3 | round }} {{ 2.1 | round(0, 'ceil') }}",
     "{}",
     "42 3 0 7 3 2.5 3.0 3 2.57 2.0 4.0 3 3.0"},
    {"f_string_list", "{{ 5 | string }} {{ 'ab' | list }} {{ none | string }} {{ xs | list }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "5 ['a', 'b'] None [3, 1, 2]"},
    {"f_indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b"},
    {"f_escape_safe", "{{ '<a href=\"x\">&</a>' | e }} {{ '<b>' | safe }}",
     "{}",
     "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; <b>"},
    {"f_wordcount_center", "{{ 'one two  three' | wordcount }} [{{ 'ab' | center(6) }}]",
     "{}",
     "3 [  ab  ]"},
    {"f_min_max_sum", "{{ xs | min }} {{ xs | max }} {{ xs | sum }} {{ users | sum(attribute='age', start=10) if false else '' }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "1 3 6 "},
    {"tests_types", "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ 's' is string }} {{ d is mapping }} {{ xs is sequence }} {{ xs is iterable }} {{ 1 is iterable }} {{ none is none }} {{ true is true }} {{ 0 is false }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "True True True True True True True True False True True False"},
    {"tests_values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 'a' is in 'abc' }} {{ 1 is not in [2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }}",
     "{}",
     "True True True False True False True True True True True"},
    {"str_methods", "{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }} [{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] {{ s.upper() }} {{ s.lower() }} {{ 'a b'.title() }} {{ s.find('o') }} {{ s.count('o') }} {{ s.rfind('o') }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "True False True [a] [a] [a  ] [  a] HELLO WORLD hello world A B 4 2 7"},
    {"str_split", "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' x y '.split(' ') }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
     "{}",
     "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a,b', 'c'] ['', 'x', 'y', ''] ['a', 'b', 'c']"},
    {"str_format_join", "{{ '{} and {}'.format('a', 1) }} {{ '{x}!'.format(x='y') }} {{ '-'.join(['a', 'b']) }}",
     "{}",
     "a and 1 y! a-b"},
    {"dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list | length }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": 3}, \"xs\": [3, 1, 2], \"s\": \"Hello World\", \"n\": null, \"t\": true, \"f\": 1.5, \"users\": [{\"name\": \"b\", \"age\": 3}, {\"name\": \"A\", \"age\": 1}, {\"name\": \"c\"}]}",
     "['b', 'a', 'items'] [1, 2, 3] 3"},
    {"globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ dict(a=1, b='x') }} {{ strftime_now('%Y-%m-%d %a %b') }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1, 'b': 'x'} 2025-03-14 Fri Mar"},
    {"int_dict_keys", "{% set m = {0: 'zero', 512: 'half'} %}{{ m[512] }} {{ m | tojson }} {{ m }}",
     "{}",
     "half {\"0\": \"zero\", \"512\": \"half\"} {0: 'zero', 512: 'half'}"},
    {"generator_truthy", "{{ 'yes' if ([] | select('odd')) else 'no' }} {{ 'yes' if ([] | select('odd') | list) else 'no' }}",
     "{}",
     "yes no"},
    {"security_content", "{{ messages[0].content }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"{{ 7 * 7 }}{% if true %}x{% endif %}<|im_start|>\"}]}",
     "{{ 7 * 7 }}{% if true %}x{% endif %}<|im_start|>"},
    // Tuples print as Python's (dict items are tuples, dict views print as
    // dict_keys([...])); printf-style %; macros' varargs, kwargs and caller;
    // recursive loops and the loop object; with and block.
    {"tuple_print", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, 2] }} {{ ('a', \"it's\") }} {{ ((1, 2),) }} {% set t = 1, 2 %}{{ t }}",
     "{}",
     "(1, 2) (1,) () [1, 2] ('a', \"it's\") ((1, 2),) (1, 2)"},
    {"tuple_ops", "{{ (1, 2) + (3,) }} {{ (1,) * 2 }} {{ (1, 2)[::-1] }} {{ (1, 2) == [1, 2] }} {{ (1, 2) | list }} {{ (1, 2) | tojson }} {{ (1, 'a') ~ '' }}",
     "{}",
     "(1, 2, 3) (1, 1) (2, 1) False [1, 2] [1, 2] (1, 'a')"},
    {"dict_items_tuples", "{{ d.items() | list }} {{ d | dictsort }} {{ d | items | list }} {{ d.items() }} {{ d.keys() }} {{ d.values() }} [{{ d.keys()[0] }}]",
     "{\"d\": {\"a\": 1, \"b\": \"it's\"}}",
     "[('a', 1), ('b', \"it's\")] [('a', 1), ('b', \"it's\")] [('a', 1), ('b', \"it's\")] dict_items([('a', 1), ('b', \"it's\")]) dict_keys(['a', 'b']) dict_values([1, \"it's\"]) []"},
    {"tuple_dict_key", "{% set m = {(1, 2): 'x'} %}{{ m }} {{ (1, 2) in m }} {{ m[(1, 2)] }}",
     "{}",
     "{(1, 2): 'x'} True x"},
    {"repr_quotes_unicode", "{{ [\"it's\", 'a\"b', 'é', '\\u00a0', '\\u2028'] }}",
     "{}",
     "[\"it's\", 'a\"b', 'é', '\\xa0', '\\u2028']"},
    {"percent_basic", "{{ '%s and %d' % ('a', 3) }} {{ '%s' % 'x' }} {{ '%r' % 'x' }} {{ '%05.2f' % f }} [{{ '%-5s' % 'ab' }}] {{ '100%%' % () }} {{ '%s' % xs }}",
     "{\"d\": {\"a\": 1, \"b\": \"it's\"}, \"xs\": [3, 1, 2], \"f\": 3.14159}",
     "a and 3 x 'x' 03.14 [ab   ] 100% [3, 1, 2]"},
    {"percent_ints", "{{ '%5d|%-5d|%05d' % (42, 42, -42) }} {{ '%x %X %o %#x' % (255, 255, 8, 255) }} {{ '%+d' % 5 }} {{ '%d' % 3.9 }} {{ '%.3d' % 5 }}",
     "{}",
     "   42|42   |-0042 ff FF 10 0xff +5 3 005"},
    {"percent_floats", "{{ '%f %e %g %.0f %.0f' % (1.5, 12345.678, 0.00001234, 0.5, 1.5) }} {{ '%.2f' % 2 }} {{ '%#.0f' % 3 }}",
     "{}",
     "1.500000 1.234568e+04 1.234e-05 0 2 2.00 3."},
    {"percent_text", "{{ '%.3s|%5.1s|' % ('abcdef', 'xyz') }} {{ '%c%c' % (65, 'b') }} {{ '%s %s' % (none, true) }} {{ '%r' % ([1, 'a'],) }} [{{ '%*d' % (4, 1) }}]",
     "{}",
     "abc|    x| Ab None True [1, 'a'] [   1]"},
    {"percent_mapping", "{{ '%(a)s-%(b)r' % d }} {{ 'hi' % d }} {{ '%s' % nope }}",
     "{\"d\": {\"a\": 1, \"b\": \"it's\"}}",
     "1-\"it's\" hi "},
    {"format_filter", "{{ '%s-%s' | format(1, 'a') }} {{ '%(x)s' | format(x='y') }}",
     "{}",
     "1-a y"},
    {"macro_varargs_kwargs", "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }} {{ m(1) }} {{ m(1, a=2) }}",
     "{}",
     "1|(2, 3)|{'x': 4} 1|()|{} 1|()|{'a': 2}"},
    {"macro_forward", "{% macro f(a, b) %}{{ a }}-{{ b }}{% endmacro %}{% macro g() %}{{ f(*varargs, **kwargs) }}{% endmacro %}{{ g(1, b=2) }} {{ f(*'xy') }}",
     "{}",
     "1-2 x-y"},
    {"macro_object", "{% macro m(a, b=1) %}{{ kwargs }}{% endmacro %}{{ m.name }} {{ m.arguments }} {{ m.catch_kwargs }} {{ m.catch_varargs }} {{ m }}",
     "{}",
     "m ('a', 'b') True False <Macro 'm'>"},
    {"caller_kwargs", "{% macro m() %}{{ caller(1, 2, k=3) }}{{ kwargs }}{% endmacro %}{% call m(z=1) %}{{ varargs }}{{ kwargs }}{% endcall %}",
     "{}",
     "(1, 2){'k': 3}{'z': 1}"},
    {"caller_undefined", "{% macro m() %}[{{ caller is defined }}]{% endmacro %}{{ m() }}",
     "{}",
     "[False]"},
    {"recursive_loop", "{% for item in tree recursive %}<{{ item.name }}:{{ loop.depth }}{{ loop.depth0 }}{% if item.children %}[{{ loop(item.children) }}]{% endif %}>{% endfor %}",
     "{\"tree\": [{\"name\": \"a\", \"children\": [{\"name\": \"b\", \"children\": []}]}, {\"name\": \"c\", \"children\": []}]}",
     "<a:10[<b:21>]><c:10>"},
    {"recursive_else_filter", "{% for item in tree if item.name != 'b' recursive %}{{ item.name }}({{ loop(item.children) }}){% else %}E{% endfor %}",
     "{\"tree\": [{\"name\": \"a\", \"children\": [{\"name\": \"b\", \"children\": []}]}, {\"name\": \"c\", \"children\": []}]}",
     "a(E)c(E)"},
    {"loop_changed_cycle", "{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{{ loop.cycle('a', 'b') }}{{ loop['index'] }}{{ loop is mapping }}{{ loop }};{% endfor %}",
     "{}",
     "Truea1False<LoopContext 1/3>;Falseb2False<LoopContext 2/3>;Truea3False<LoopContext 3/3>;"},
    {"with_block", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}{% for x in [5] %}{% block b %}[{{ x }}{{ a }}]{% endblock %}{% endfor %}",
     "{}",
     "211[1]"},
    {"unsafe_undefined", "[{{ xs.append }}] {{ xs.append is defined }}",
     "{\"xs\": [3, 1, 2]}",
     "[] False"},
};

TEST(Jinja, MatchesJinja2) {
    for (const Case& c : kCases) {
        SCOPED_TRACE(c.name);
        try {
            EXPECT_EQ(render(c.source, c.context), c.expected) << c.source;
        } catch (const Error& e) {
            ADD_FAILURE() << c.source << "\n  threw: " << e.what();
        }
    }
}

struct ErrorCase {
    const char* name;
    const char* source;
    const char* context;
};

// jinja2 raises on each of these (at parse or at render): so must we.
const ErrorCase kErrors[] = {
    {"err_raise", "{{ raise_exception('bad role') }}", "{}"},  // jinja2: RaisedByTemplate: bad role
    {"err_undefined_attr", "{{ nope.attr }}", "{}"},  // jinja2: UndefinedError: 'nope' is undefined
    {"err_undefined_call", "{{ nope() }}", "{}"},  // jinja2: UndefinedError: 'nope' is undefined
    {"err_undefined_add", "{{ nope + 1 }}", "{}"},  // jinja2: UndefinedError: 'nope' is undefined
    {"err_str_int_add", "{{ 'a' + 1 }}", "{}"},  // jinja2: TypeError: can only concatenate str (not "int") to str
    {"err_div_zero", "{{ 1 // 0 }}", "{}"},  // jinja2: ZeroDivisionError: integer division or modulo by zero
    {"err_unknown_filter", "{{ 1 | frobnicate }}", "{}"},  // jinja2: TemplateAssertionError: No filter named 'frobnicate'.
    {"err_unknown_test", "{{ 1 is frobnicated }}", "{}"},  // jinja2: TemplateAssertionError: No test named 'frobnicated'.
    {"err_append_unsafe", "{% set xs = [] %}{% set _ = xs.append(1) %}", "{}"},  // jinja2: SecurityError: access to attribute 'append' of 'list' object is unsafe.
    {"err_tojson_undefined", "{{ nope | tojson }}", "{}"},  // jinja2: TypeError: Object of type Undefined is not JSON serializable
    {"err_none_iter", "{% for x in none %}{% endfor %}", "{}"},  // jinja2: TypeError: 'NoneType' object is not iterable
    {"err_set_attr_non_ns", "{% set d = {} %}{% set d.x = 1 %}", "{}"},  // jinja2: TemplateRuntimeError: cannot assign attribute on non-namespace object
    {"err_generator_tojson", "{{ [1] | map('string') | tojson }}", "{}"},  // jinja2: TypeError: Object of type generator is not JSON serializable
    {"err_len_int", "{{ 5 | length }}", "{}"},  // jinja2: TypeError: object of type 'int' has no len()
    {"err_compare", "{{ 1 < 'a' }}", "{}"},  // jinja2: TypeError: '<' not supported between instances of 'int' and 'str'
    {"err_list_plus_tuple", "{{ [1] + (2,) }}", "{}"},  // jinja2: TypeError: can only concatenate list (not "tuple") to list
    {"err_view_tojson", "{% set d = {'a': 1} %}{{ d.keys() | tojson }}", "{}"},  // jinja2: TypeError: Object of type dict_keys is not JSON serializable
    {"err_unhashable_tuple", "{{ {(1, [2]): 'x'} }}", "{}"},  // jinja2: TypeError: unhashable type: 'list'
    {"err_percent_few", "{{ '%s %s' % 'ab' }}", "{}"},  // jinja2: TypeError: not enough arguments for format string
    {"err_percent_many", "{{ '%s' % (1, 2) }}", "{}"},  // jinja2: TypeError: not all arguments converted during string formatting
    {"err_percent_d_str", "{{ '%d' % 'x' }}", "{}"},  // jinja2: TypeError: %d format: a real number is required, not str
    {"err_percent_x_float", "{{ '%x' % 3.0 }}", "{}"},  // jinja2: TypeError: %x format: an integer is required, not float
    {"err_percent_char", "{{ '%q' % 1 }}", "{}"},  // jinja2: ValueError: unsupported format character 'q' (0x71) at index 1
    {"err_percent_incomplete", "{{ '%' % 1 }}", "{}"},  // jinja2: ValueError: incomplete format
    {"err_percent_key", "{{ '%(zz)s' % {} }}", "{}"},  // jinja2: KeyError: 'zz'
    {"err_macro_varargs_unread", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{}"},  // jinja2: TypeError: macro 'm' takes not more than 1 argument(s)
    {"err_macro_kwargs_unread", "{% macro m(a) %}{{ varargs }}{% endmacro %}{{ m(1, b=2) }}", "{}"},  // jinja2: TypeError: macro 'm' takes no keyword argument 'b'
    {"err_macro_positional_then_keyword", "{% macro m(a, b) %}{% endmacro %}{{ m(1, a=2) }}", "{}"},  // jinja2: TypeError: macro 'm' takes no keyword argument 'a'
    {"err_caller_unread", "{% macro m() %}x{% endmacro %}{% call m() %}x{% endcall %}", "{}"},  // jinja2: TypeError: macro 'm' was invoked with two values for the special caller argument
    {"err_caller_missing", "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}", "{}"},  // jinja2: UndefinedError: No caller defined
    {"err_caller_param", "{% macro m(caller) %}{{ caller }}{% endmacro %}", "{}"},  // jinja2: TemplateAssertionError: ... the special "caller" argument must be omitted or be given a default.
    {"err_star_none", "{% macro m() %}{{ varargs }}{% endmacro %}{{ m(*none) }}", "{}"},  // jinja2: TypeError: Value after * must be an iterable, not NoneType
    {"err_loop_not_recursive", "{% for x in [1] %}{{ loop([2]) }}{% endfor %}", "{}"},  // jinja2: TypeError: The loop must have the 'recursive' marker to be called recursively.
    {"err_recursive_order", "{% for x in [1] recursive if x %}{% endfor %}", "{}"},  // jinja2: TemplateSyntaxError: expected token 'end of statement block', got 'if'
    {"err_endless_recursive_loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", "{}"},  // jinja2: RecursionError
    {"err_include", "{% include 'x.jinja' %}", "{}"},  // jinja2: TypeError: no loader for this environment specified
    {"err_import", "{% import 'x.jinja' as m %}", "{}"},  // jinja2: TypeError: no loader for this environment specified
    {"err_from_import", "{% from 'x.jinja' import m %}", "{}"},  // jinja2: TypeError: no loader for this environment specified
    {"err_extends", "{% extends 'x.jinja' %}", "{}"},  // jinja2: TypeError: no loader for this environment specified
    {"err_block_twice", "{% block a %}{% endblock %}{% block a %}{% endblock %}", "{}"},  // jinja2: TemplateAssertionError: block 'a' defined twice
};

TEST(Jinja, ErrorsWhereJinja2Raises) {
    for (const ErrorCase& c : kErrors) {
        SCOPED_TRACE(c.name);
        EXPECT_THROW(render(c.source, c.context), Error) << c.source;
    }
}

TEST(Jinja, RaiseExceptionCarriesMessage) {
    try {
        render("line one\n{% if messages | length == 0 %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}",
               R"({"messages": []})");
        FAIL() << "no exception";
    } catch (const RaisedError& e) {
        EXPECT_EQ(e.message(), "Conversation roles must alternate");
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
}

// The message of the Error `src` throws at parse or render.
std::string error_of(const std::string& src, const std::string& ctx = "{}", const RenderOptions& opt = fixed_time()) {
    try {
        render(src, ctx, opt);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
    EXPECT_NE(error_of("a\nb\n{{ 1 + }}").find("line 3"), std::string::npos) << error_of("a\nb\n{{ 1 + }}");
    EXPECT_NE(error_of("{% if x %}\n\n{% for y in z %}\n").find("unclosed"), std::string::npos);
    EXPECT_NE(error_of("{% if x %}\n\n{% for y in z %}\n").find("'endfor'"), std::string::npos);
    EXPECT_NE(error_of("x\n{% frobnicate %}").find("line 2: unknown or unsupported tag 'frobnicate'"), std::string::npos)
        << error_of("x\n{% frobnicate %}");
    EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
    EXPECT_NE(error_of("{# never closed").find("missing end of comment"), std::string::npos);
    EXPECT_NE(error_of("{{ x ").find("expected '}}'"), std::string::npos);
    EXPECT_NE(error_of("{% endif %}").find("unknown or unsupported tag 'endif'"), std::string::npos);
    EXPECT_NE(error_of("{{ (1 }}").find("line 1"), std::string::npos);
    EXPECT_NE(error_of("{% raw %}never closed").find("missing end of raw"), std::string::npos);
    // A render error names the line it happened on.
    EXPECT_NE(error_of("ok\n\n{{ nope.attr }}").find("line 3: 'nope' is undefined"), std::string::npos) << error_of("ok\n\n{{ nope.attr }}");
}

TEST(Jinja, NewFeatureErrorsNameTheLine) {
    // Clear messages, each with the line it happened on.
    EXPECT_NE(error_of("a\n{{ '%s %s' % 'ab' }}").find("line 2: not enough arguments for format string"), std::string::npos);
    EXPECT_NE(error_of("a\n\n{{ '%s' % (1, 2) }}").find("line 3: not all arguments converted during string formatting"), std::string::npos);
    EXPECT_NE(error_of("{{ '%q' % 1 }}").find("line 1: unsupported format character 'q' (0x71) at index 1"), std::string::npos)
        << error_of("{{ '%q' % 1 }}");
    EXPECT_NE(error_of("{{ '%d' % 'x' }}").find("%d format: a real number is required, not str"), std::string::npos);
    EXPECT_NE(error_of("{% macro m(a) %}{{ a }}{% endmacro %}\n{{ m(1, 2) }}").find("line 2: macro 'm' takes not more than 1 argument(s)"),
              std::string::npos);
    EXPECT_NE(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, b=2) }}").find("macro 'm' takes no keyword argument 'b'"), std::string::npos);
    EXPECT_NE(error_of("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}").find("No caller defined"), std::string::npos);
    EXPECT_NE(error_of("x\n{% macro m(caller) %}{{ caller }}{% endmacro %}").find("line 2: When defining macros"), std::string::npos);
    EXPECT_NE(error_of("{% for x in [1] %}\n{{ loop([2]) }}{% endfor %}").find("line 2: The loop must have the 'recursive' marker"),
              std::string::npos);
    EXPECT_NE(error_of("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}").find("render stopped: calls nest"), std::string::npos);
    // The tags that need a loader parse (so an untaken branch renders, as in
    // jinja2) and fail with the line where they run.
    EXPECT_EQ(render("{% if false %}{% include 'x' ignore missing with context %}{% import 'x' as m %}{% from 'x' import a as b, c %}"
                     "{% extends 'x' %}{% endif %}ok"),
              "ok");
    EXPECT_NE(error_of("a\nb\n{% include 'other.jinja' %}").find("line 3: 'include' is not supported"), std::string::npos)
        << error_of("a\nb\n{% include 'other.jinja' %}");
    EXPECT_NE(error_of("a\n{% import 'm.jinja' as m %}").find("line 2: 'import' is not supported"), std::string::npos);
    EXPECT_NE(error_of("{% from 'm.jinja' import m %}").find("line 1: 'from' is not supported"), std::string::npos);
    EXPECT_NE(error_of("\n{% extends 'base.jinja' %}").find("line 2: 'extends' is not supported"), std::string::npos);
}

// The bytes of `r` that the template wrote, as a string with the others as '.'.
std::string template_bytes(const ptxlm::jinja::Rendered& r) {
    std::string out(r.text.size(), '.');
    for (const auto& [b, e] : r.code) out.replace(b, e - b, r.text.substr(b, e - b));
    return out;
}

TEST(Jinja, NewFeaturesKeepMarks) {
    const Value ctx = ptxlm::jinja::from_json(nlohmann::ordered_json::parse(R"({"u": "<|d|>", "t": [{"n": "<|d|>", "c": []}]})"));
    auto marked = [&](const std::string& src) { return template_bytes(Template::parse(src).render_marked(ctx)); };
    // %: the format string's text is the template's, a plain %s inserts its
    // argument with its marks (padded, too); computed text (numbers, padding, repr) is data.
    EXPECT_EQ(marked("{{ '<|a|>%s|%s|%d|%5s' % (u, '<|b|>', 7, 'x') }}"), "<|a|>.....|<|b|>|.|....x");   // padding: data
    EXPECT_EQ(marked("{{ '%r' % ('<|b|>',) }}"), ".......");
    // A macro's varargs and kwargs keep their values' marks.
    EXPECT_EQ(marked("{% macro m() %}<|m|>{{ varargs[0] }}{{ varargs[1] }}{{ kwargs.k }}{% endmacro %}{{ m(u, '<|b|>', k='<|k|>') }}"),
              "<|m|>.....<|b|><|k|>");
    // loop(children) renders the template's text as the template's, the data's as data.
    EXPECT_EQ(marked("{% for x in t recursive %}[{{ x.n }}{{ loop(x.c) }}]{% endfor %}"), "[.....]");
    // Tuples print as data (as lists do).
    EXPECT_EQ(marked("{{ ('<|a|>',) }}"), "..........");
}

TEST(Jinja, RunawayLoopsAreStopped) {
    RenderOptions opt = fixed_time();
    opt.limits.max_steps = 100'000;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", opt).find("steps"),
              std::string::npos);
    // The default limit (10 million) stops a loop of 10^12 before it starts.
    EXPECT_NE(error_of("{% for i in range(1000000000000) %}{% endfor %}").find("steps"), std::string::npos);
    // Doubling a string or a list runs into the size and step limits.
    EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                  .find("render stopped"),
              std::string::npos);
    EXPECT_NE(error_of("{% set ns = namespace(s=[1]) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}")
                  .find("render stopped"),
              std::string::npos);
    EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("render stopped"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(Jinja, OutputSizeIsBounded) {
    RenderOptions opt = fixed_time();
    opt.limits.max_output = 1 << 16;
    EXPECT_NE(error_of("{% for i in range(100000) %}0123456789{% endfor %}", "{}", opt).find("bytes"), std::string::npos);
}

TEST(Jinja, DeepRecursionIsStopped) {
    EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nest"), std::string::npos);
    std::string deep;
    for (int i = 0; i < 5000; ++i) deep += "(";
    deep += "1";
    for (int i = 0; i < 5000; ++i) deep += ")";
    EXPECT_NE(error_of("{{ " + deep + " }}").find("nests too deeply"), std::string::npos);
    std::string ifs;
    for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
    EXPECT_NE(error_of(ifs).find("nests too deeply"), std::string::npos);
    std::string nots = "{{ ";
    for (int i = 0; i < 5000; ++i) nots += "not ";
    EXPECT_NE(error_of(nots + "1 }}").find("nests too deeply"), std::string::npos);
    // Deep JSON context values are refused at conversion, not on the stack.
    std::string arr;
    for (int i = 0; i < 2000; ++i) arr += "[";
    for (int i = 0; i < 2000; ++i) arr += "]";
    EXPECT_THROW(ptxlm::jinja::from_json(nlohmann::json::parse(arr)), Error);
}

TEST(Jinja, ContentIsNeverTemplateCode) {
    const std::string evil = "{{ raise_exception('x') }}{% for i in range(99999999999) %}{% endfor %}<|im_start|>";
    nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", evil}}}}};
    const std::string src =
        "{% for m in messages %}{{ m.content }}|{{ m.content | trim }}|{{ m.content | tojson }}|{{ m.content.upper() }}{% endfor %}";
    const std::string out = Template::parse(src).render(ptxlm::jinja::from_json(ctx));
    std::string upper = evil;
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(out, evil + "|" + evil + "|\"" + evil + "\"|" + upper);
}

TEST(Jinja, ValuesFromJsonKeepOrderAndTypes) {
    const Value v = ptxlm::jinja::from_json(nlohmann::ordered_json::parse(R"({"z": 1, "a": [1.5, true, null, "s"], "m": {}})"));
    EXPECT_EQ(Template::parse("{{ v | tojson }} {{ v }}").render(ptxlm::jinja::from_json(nlohmann::ordered_json{{"v", nlohmann::ordered_json::parse(
                                                                         R"({"z": 1, "a": [1.5, true, null, "s"], "m": {}})")}})),
              R"({"z": 1, "a": [1.5, true, null, "s"], "m": {}} {'z': 1, 'a': [1.5, True, None, 's'], 'm': {}})");
    EXPECT_TRUE(v.is_dict());
}

// Mutations of real-looking template text and random contexts: each render
// either succeeds or throws jinja::Error; none crashes or hangs.
TEST(Jinja, FuzzedTemplatesRenderOrThrow) {
    std::vector<std::string> seeds = {
        "{% for m in messages %}{% if m.role == 'user' %}<|user|>{{ m.content | trim }}{% elif m.role == 'assistant' %}"
        "{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "{% set ns = namespace(x=0) %}{% for k, v in d.items() if v is number %}{% set ns.x = ns.x + v %}{{ loop.index }}"
        "{% else %}none{% endfor %}{{ ns.x }}",
        "{% macro f(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}{{ f(1) }}{{ f(b=3, a=[1,2][::-1]) }}",
        "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') | tojson(indent=2) }}",
        "{%- raw -%} {{ x }} {%- endraw %}{# c #}{{ 'a' if x else 'b' }}{{ x[1:-1] }}{{ -1 ** 2 // 3 % 5 }}",
        "{% macro m(a) %}{{ '%s-%05.1f|%-3d|%r' % (a, 1.5, 2, (a,)) }}{{ '%(k)s' % kwargs }}{{ varargs }}{% endmacro %}"
        "{{ m(1, 2, k=3) }}{% for x in [[1, [2, []]]] recursive %}{{ loop.depth }}{{ loop.changed(x) }}"
        "{{ loop(x | select('iterable')) }}{% endfor %}{% with t = (1, 'a') %}{{ t }}{{ d.items() | list }}{% endwith %}",
    };
    const char* fragments[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}", "'", "\"", "|",
                               ".", ",", ":", "if", "endif", "for", "endfor", "in", "not", "set", "macro", "endmacro",
                               "loop", "range(", "99999999", "\n", " ", "\\", "~", "*", "**", "//", "is", "defined",
                               "raw", "endraw", "namespace(", "call", "filter", "break", "continue", "else", "é", "\x00"};
    // And real templates (llama.cpp's corpus, as tests/py/check_jinja.py renders them).
    for (const char* name : {"Qwen3-Coder.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja", "google-gemma-4-31B-it.jinja",
                             "openai-gpt-oss-120b.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                             "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "ByteDance-Seed-OSS.jinja",
                             "deepseek-ai-DeepSeek-V3.1.jinja", "ibm-granite-granite-4.0.jinja", "Kimi-K3.jinja"}) {
        std::ifstream f(std::string(PTXLM_SOURCE_DIR) + "/tests/data/jinja_templates/" + name, std::ios::binary);
        ASSERT_TRUE(f) << name;
        seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    const char* contexts[] = {
        R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}], "d": {"a": 1, "b": "x"}, "x": "str"})",
        R"({"messages": "not a list", "d": [1, 2], "x": null, "add_generation_prompt": true})",
        R"({"messages": [[], {}, 1, 2.5, true], "d": {}, "x": [1, [2, [3]]]})",
        R"({})",
        R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                         {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": "f", "arguments": {"a": 1}}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
            "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>"})",
    };
    std::mt19937 rng(1234);
    RenderOptions opt = fixed_time();
    opt.limits.max_steps = 200'000;
    opt.limits.max_output = 1 << 20;
    int rendered = 0, threw = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int iter = 0; iter < 4000; ++iter) {
        std::string src = seeds[rng() % seeds.size()];
        const int edits = 1 + int(rng() % 3);
        for (int e = 0; e < edits; ++e) {
            const size_t pos = src.empty() ? 0 : rng() % (src.size() + 1);
            switch (rng() % 4) {
                case 0: src.insert(pos, fragments[rng() % std::size(fragments)]); break;
                case 1: if (!src.empty()) src.erase(pos % src.size(), 1 + rng() % 8); break;
                case 2: if (!src.empty()) src[pos % src.size()] = char(rng() % 128); break;
                default: {   // duplicate a slice
                    if (src.empty()) break;
                    const size_t b = rng() % src.size(), n = std::min<size_t>(rng() % 40, src.size() - b);
                    src.insert(pos, src.substr(b, n));
                }
            }
        }
        try {
            const Template t = Template::parse(src, opt.limits);
            const std::string ctx = contexts[rng() % std::size(contexts)];
            t.render(ptxlm::jinja::from_json(nlohmann::ordered_json::parse(ctx)), opt);
            ++rendered;
        } catch (const Error&) {
            ++threw;
        }
    }
    EXPECT_EQ(rendered + threw, 4000);
    std::printf("fuzz: %d rendered, %d threw jinja::Error\n", rendered, threw);
    EXPECT_GT(rendered, 100);
    EXPECT_GT(threw, 100);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

}  // namespace

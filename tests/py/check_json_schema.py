"""ptxlm's JSON Schema to GBNF converter against the `jsonschema` validator.

A table of schemas (every supported keyword, recursion, bounds at their edge
values, and Pydantic's model_json_schema() output), each with valid and
invalid instances. The table is checked first: `jsonschema` (draft 2020-12,
with format checks) must accept each valid instance and refuse each invalid
one. Then each schema goes through json_schema_tool, and grammar_check
matches every instance, serialized in the grammar's property order (the
schema's) three ways: json.dumps' default, its compact form and indent=2.
Valid instances must be complete matches, invalid ones must not be.

Besides: texts the grammar must reject though they are JSON-ish (too much
whitespace, raw control characters), "narrower" texts that the schema allows
but the grammar deliberately does not (json_schema.h lists them: integers
written 1.0, extra keys where properties are listed), Pydantic models
validating the valid instances, and unsupported keywords reported by name.

usage: check_json_schema.py path/to/grammar_check path/to/json_schema_tool
"""
import datetime
import enum
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Literal, Optional

import jsonschema
from pydantic import BaseModel, Field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402

GRAMMAR_CHECK, TOOL = sys.argv[1], sys.argv[2]

# jsonschema checks date and uuid itself; time and date-time need a package
# the venv lacks, so they are checked here: RFC 3339's shape, and the values
# through Python's datetime (month 13, hour 24 refused).
FORMATS = jsonschema.FormatChecker()
RFC3339_TIME = r"\d{2}:\d{2}:\d{2}(\.\d+)?([zZ]|[+-]\d{2}:\d{2})"


@FORMATS.checks("time", raises=ValueError)
def _time(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(RFC3339_TIME, s):
        return False
    datetime.time.fromisoformat(re.sub("[zZ]$", "+00:00", s))
    return True


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[tT]" + RFC3339_TIME, s):
        return False
    datetime.datetime.fromisoformat(re.sub("[zZ]$", "+00:00", s).replace("t", "T"))
    return True


def valid_under(schema, instance):
    v = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
    return v.is_valid(instance)


# ---- Pydantic models ----------------------------------------------------------

class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    street: str
    city: str
    zip: Optional[str] = None


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    age: int = Field(ge=0, le=150)
    email: Optional[str] = None
    color: Color
    tags: list[str] = Field(default_factory=list, max_length=3)
    address: Address
    kind: Literal["human", "robot"]
    born: datetime.date
    seen: datetime.datetime
    score: float = Field(gt=0, lt=1)


class Tree(BaseModel):
    value: int
    children: list["Tree"] = []


class Step(BaseModel):  # the shape of OpenAI's structured-output examples
    explanation: str
    output: str


class Reasoning(BaseModel):
    steps: list[Step]
    final_answer: str
    confidence: Literal["low", "high"]
    retries: Optional[int] = Field(default=None, ge=0, le=3)


PERSON = dict(name="Ada", age=36, email=None, color="green", tags=["x", "y"],
              address=dict(street="1 Main St", city="London", zip=None), kind="human",
              born="1815-12-10", seen="2024-05-01T12:30:00Z", score=0.5)

# ---- The table -----------------------------------------------------------------
# name, schema, valid instances, invalid instances.
TABLE = [
    ("string", {"type": "string"}, ["", "héllo", "a\"b\\c\n\t\u0001", "\u20ac\U0001F600"], [1, None, ["a"]]),
    ("number", {"type": "number"}, [0, -1, 3.25, 1e-7, -2.5e+30, 10], ["1", None, True]),
    ("integer", {"type": "integer"}, [0, -7, 123456789012345678901234], [1.5, "1", True]),
    ("boolean", {"type": "boolean"}, [True, False], [0, "true", None]),
    ("null", {"type": "null"}, [None], [0, False, ""]),
    ("type list", {"type": ["string", "null", "integer"]}, ["a", None, 5], [1.5, True, [], {}]),
    ("any {}", {}, [0, "a", None, [1, {"a": [True]}], {"x": {"y": []}}], []),
    ("any true", True, [1, [], {"a": None}], []),
    ("annotations", {"title": "T", "description": "d", "default": 1, "examples": [2], "$comment": "c",
                     "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:x",
                     "deprecated": False, "readOnly": True, "writeOnly": False, "type": "integer"}, [1], ["1"]),
    ("object required/optional",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
                                       "d": {"type": "null"}},
      "required": ["b", "d"], "additionalProperties": False},
     [{"b": "x", "d": None}, {"a": 1, "b": "x", "d": None}, {"a": 1, "b": "", "c": True, "d": None},
      {"b": "x", "c": False, "d": None}],
     [{"a": 1, "d": None}, {"b": "x"}, {"b": "x", "d": None, "e": 1}, {"b": 1, "d": None}, [], "x"]),
    ("object all optional",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}], [{"c": 1}, {"a": "1"}]),
    ("additionalProperties true",
     {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": True},
     [{"id": 1}, {"id": 1, "x": [1], "y": {"z": None}}], [{"x": 1}, {"id": "1"}]),
    ("additionalProperties schema (a dict)",
     {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
     [{}, {"a": 0}, {"a": 1, "b": 22}], [{"a": -1}, {"a": "x"}, []]),
    ("free object", {"type": "object"}, [{}, {"a": {"b": [1, 2]}}], [[], 1]),
    ("required beyond properties",
     {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["z"],
      "additionalProperties": {"type": "string"}},
     [{"z": "q"}, {"a": 1, "z": "q"}], [{"a": 1}, {"z": 1}]),
    ("enum", {"enum": ["red", 1, None, True, [1, "a"], {"k": "v"}, 2.5]},
     ["red", 1, None, True, [1, "a"], {"k": "v"}, 2.5], ["blue", 2, False, [1], {"k": "w"}]),
    ("enum with type", {"type": "string", "enum": ["a", "b", 3]}, ["a", "b"], [3, "c"]),
    ("const", {"const": {"mode": "fast", "n": [1, 2]}}, [{"mode": "fast", "n": [1, 2]}],
     [{"mode": "slow", "n": [1, 2]}, {"mode": "fast"}]),
    ("anyOf", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]},
     ["", "ab", 10, 99], ["abc", 9, None]),
    ("oneOf", {"oneOf": [{"type": "boolean"}, {"type": "null"}]}, [True, None], [0, "x"]),
    ("allOf single", {"allOf": [{"type": "integer", "maximum": 3}], "description": "d"}, [3, -1], [4, "3"]),
    ("array items", {"type": "array", "items": {"type": "integer"}}, [[], [1], [1, 2, 3]], [[1, "a"], {}, [1.5]]),
    ("array min/max", {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
     [["a", "b"], ["a", "b", "c"]], [[], ["a"], ["a", "b", "c", "d"]]),
    ("array exactly one", {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 1},
     [[True]], [[], [True, False]]),
    ("array no items", {"type": "array", "maxItems": 0}, [[]], [[1]]),
    ("prefixItems closed", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [[], ["a"], ["a", 1]], [[1], ["a", "b"], ["a", 1, 2]]),
    ("prefixItems then items",
     {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "boolean"},
      "minItems": 2, "maxItems": 4},
     [["a", 1], ["a", 1, True], ["a", 1, True, False]], [["a"], ["a", 1, 2], ["a", 1, True, True, True]]),
    ("string length (code points)", {"type": "string", "minLength": 2, "maxLength": 3},
     ["ab", "abc", "é€", "\u20ac\u20ac\u20ac", "a\nb"], ["", "a", "abcd", "€"]),
    ("pattern anchored", {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(-[a-f0-9]+)?$"},
     ["AB-123", "ZZ-000-ff09"], ["AB-12", "ab-123", "AB-123-", "xAB-123", "AB-1234"]),
    ("pattern unanchored", {"type": "string", "pattern": "b+c|q\\.z"}, ["bc", "abbbcd", "xq.zy", "q.z"],
     ["", "ac", "qxz", "b c"]),
    ("pattern classes", {"type": "string", "pattern": "^[^\\s\"]+\\s?\\w*\\W?$"}, ["abc", "a b_9", "a.", "x y!"],
     ["", "a\"b", " a", "a  b"]),
    ("pattern specials", {"type": "string", "pattern": "^(?:\"|\\\\|\\n|\\t|\\x41|\\u00e9|[{}()])+$"},
     ["\"", "\\", "\n\t", "Aé", "{}()", "\"A\\"], ["", "a", "\r", "B"]),
    ("pattern nested groups", {"type": "string", "pattern": "^(?:x(y(z)?)?|(a*)*b|(c|)+d)$|^e$"},
     ["x", "xy", "xyz", "b", "aab", "d", "ccd", "e"], ["xz", "a", "xb", "", "ee", "ce"]),
    ("pattern dot and braces", {"type": "string", "pattern": "^.{2,4}x{2}$"}, ["abxx", "a\"bcxx", "é€xx"],
     ["axx", "abcdexx", "a\nxx", "abx"]),
    ("format date", {"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"],
     ["2024-13-01", "2024-1-01", "2024-01-32", "24-01-01", 20240101]),
    ("format time", {"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59.123+05:30", "00:00:00-08:00"],
     ["12:30:00", "24:00:00Z", "12:60:00Z", "1:00:00Z"]),
    ("format date-time", {"type": "string", "format": "date-time"},
     ["2024-05-01T12:30:00Z", "2024-05-01t12:30:00.5+01:00"],
     ["2024-05-01 12:30:00Z", "2024-05-01T12:30:00", "2024-05-01"]),
    ("format uuid", {"type": "string", "format": "uuid"},
     ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"],
     ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"]),
    ("integer min/max edges", {"type": "integer", "minimum": -17, "maximum": 2024},
     [-17, -9, -1, 0, 9, 10, 199, 999, 1000, 2019, 2024], [-18, -100, 2025, 9999, 10000]),
    ("integer exclusive edges", {"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 100},
     [10, 55, 99], [9, 100, 0, -10]),
    ("integer non-negative", {"type": "integer", "minimum": 0}, [0, 1, 10 ** 20], [-1, -100]),
    ("integer negative only", {"type": "integer", "maximum": -10}, [-10, -11, -10 ** 20], [-9, 0, 10]),
    ("integer float bounds", {"type": "integer", "minimum": 1.5, "maximum": 3.5}, [2, 3], [1, 4]),
    ("integer single", {"type": "integer", "minimum": 42, "maximum": 42}, [42], [41, 43]),
    ("number bounds", {"type": "number", "minimum": -3, "exclusiveMaximum": 2},
     [-3, -2.5, -0.25, 0, 1.999, 1], [-3.0001, -4, 2, 2.0, 2.5]),
    ("number exclusive zero", {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
     [0.5, 1, 0.0001, 1.0], [0, 0.0, 1.01, -0.5]),
    ("number tight", {"type": "number", "minimum": 5, "maximum": 5}, [5, 5.0], [5.1, 4.9]),
    ("$ref $defs", {"$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                                    "additionalProperties": False}},
                    "type": "object", "properties": {"a": {"$ref": "#/$defs/P"}, "b": {"$ref": "#/$defs/P"}},
                    "required": ["a", "b"], "additionalProperties": False},
     [{"a": {"x": 1}, "b": {"x": 2}}], [{"a": {"x": 1}}, {"a": {"x": "1"}, "b": {"x": 2}}]),
    ("$ref definitions", {"definitions": {"N": {"type": "integer", "minimum": 0}},
                          "type": "array", "items": {"$ref": "#/definitions/N"}}, [[0, 5]], [[-1]]),
    ("$ref # (recursive root)",
     {"type": "object", "properties": {"name": {"type": "string"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
      "required": ["name", "next"], "additionalProperties": False},
     [{"name": "a", "next": None}, {"name": "a", "next": {"name": "b", "next": {"name": "c", "next": None}}}],
     [{"name": "a", "next": {"name": "b"}}, {"name": "a"}]),
    ("recursive tree",
     {"$defs": {"Node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                          "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                         "required": ["value", "children"], "additionalProperties": False}},
      "$ref": "#/$defs/Node"},
     [{"value": 1, "children": []},
      {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}, {"value": 4, "children": []}]}],
     [{"value": 1, "children": [{"value": 2}]}, {"value": 1, "children": [1]}]),
    ("uniqueItems false", {"type": "array", "uniqueItems": False, "items": {"type": "integer"}}, [[1, 1]], [["a"]]),
    ("pydantic Person", Person.model_json_schema(),
     [PERSON, dict(PERSON, email="a@b.c", tags=[], address=dict(street="s", city="c", zip="123"), kind="robot")],
     [dict(PERSON, age=151), dict(PERSON, age=-1), dict(PERSON, name=""), dict(PERSON, color="pink"),
      dict(PERSON, tags=["a", "b", "c", "d"]), dict(PERSON, kind="cat"), dict(PERSON, score=1),
      dict(PERSON, score=0), dict(PERSON, born="1815-12-1"), {k: v for k, v in PERSON.items() if k != "address"}]),
    ("pydantic Tree", Tree.model_json_schema(),
     [{"value": 1, "children": []}, {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}]},
      {"value": 1}],
     [{"value": "1"}, {"value": 1, "children": [{"children": []}]}]),
    ("pydantic Reasoning", Reasoning.model_json_schema(),
     [dict(steps=[dict(explanation="e", output="o")], final_answer="42", confidence="high", retries=None),
      dict(steps=[], final_answer="x", confidence="low", retries=3), dict(steps=[], final_answer="x", confidence="low")],
     [dict(steps=[dict(explanation="e")], final_answer="42", confidence="high"),
      dict(steps=[], final_answer="x", confidence="low", retries=4)]),
]

# Texts the grammar must reject (not a complete match), whatever jsonschema says.
REJECT = [
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, ['{"a":  1}', '{"a": 1}  ', ' {"a": 1}',
                                                                   '{"a":\n' + " " * 41 + "1}", '{"a": 1,}',
                                                                   '{"a": 01}']),
    ({"type": "string"}, ['"a\x01"', '"a\nb"', '"\\x41"', '"\\u12"', '"abc']),
    ({"type": "array", "items": {"type": "integer"}}, ["[1 2]", "[,1]", "[1,]", "[\n\n1]"]),
    ({"type": "number"}, ["01", "1.", ".5", "+1", "1e", "-"]),
]

# Texts the schema allows but the grammar deliberately does not (json_schema.h).
NARROWER = [
    ({"type": "integer"}, ["1.0", "-0", "1e2"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, ['{"b": 1}', '{"a": 1, "b": 2}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}, ['{"b": 1, "a": 2}']),
    ({"type": "number", "maximum": 10}, ["1e0"]),
    ({"type": "string", "pattern": "^a$"}, ['"\\u0061"']),
]

# Schemas the converter refuses, and what the error must name.
UNSUPPORTED = [
    ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties' at /"),
    ({"properties": {"age": {"type": "integer", "minimum": "3"}}}, "'minimum' must be a number at /properties/age/minimum"),
    ({"type": "number", "multipleOf": 2}, "'multipleOf'"),
    ({"not": {"type": "string"}}, "'not'"),
    ({"if": {}, "then": {}}, "'if'"),
    ({"type": "array", "contains": {"type": "integer"}}, "'contains'"),
    ({"type": "object", "minProperties": 1}, "'minProperties'"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "'propertyNames'"),
    ({"type": "string", "format": "email"}, "'format' 'email'"),
    ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "'allOf' with 2 schemas"),
    ({"$ref": "other.json#/x"}, "'$ref' 'other.json#/x'"),
    ({"type": "string", "pattern": "\\bword\\b"}, "word boundary"),
    ({"type": "string", "pattern": "(?<=a)b"}, "lookaround"),
    ({"type": "string", "pattern": "\\p{L}"}, "escape '\\p'"),
    ({"type": "number", "minimum": 0.5}, "'minimum' of a 'number' must be a whole number"),
    ({"type": "string", "maxLength": 20000}, "'maxLength' above 10000"),
    (False, "schema 'false'"),
    ({"type": "object", "properties": {"x": {"nullable": True}}}, "'nullable' at /properties/x"),
]


def order_like(value, schema, root):
    """`value` with object keys in the grammar's order: the schema's properties first, in order."""
    if isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        target = root
        for tok in ref[2:].split("/") if ref != "#" else []:
            target = target[tok.replace("~1", "/").replace("~0", "~")]
        return order_like(value, target, root)
    if not isinstance(schema, dict):
        return value
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key, []):
            # The branch validated in the root's document, so its $refs resolve.
            in_root = jsonschema.Draft202012Validator(root, format_checker=FORMATS).evolve(schema=branch)
            if in_root.is_valid(value):
                return order_like(value, branch, root)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        out = {k: order_like(value[k], props[k], root) for k in props if k in value}
        for k in value:
            if k not in out:
                out[k] = order_like(value[k], extra, root)
        return out
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", True)
        return [order_like(v, prefix[i] if i < len(prefix) else items, root) for i, v in enumerate(value)]
    return value


def forms(value):
    return [json.dumps(value, ensure_ascii=False), json.dumps(value, ensure_ascii=False, separators=(",", ":")),
            json.dumps(value, ensure_ascii=False, indent=2)]


def convert(schema):
    r = subprocess.run([TOOL], input=json.dumps(schema), capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout


def match_all(gbnf, texts):
    """grammar_check's verdicts ({"accept", "complete"}) for each text."""
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(gbnf)
        path = f.name
    try:
        stdin = "".join(json.dumps({"text": t}) + "\n" for t in texts)
        r = subprocess.run([GRAMMAR_CHECK, path], input=stdin, capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if r.returncode != 0:
        return None, r.stdout + r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()], ""


def check_grammar(name, schema, accept, reject):
    rc, gbnf = convert(schema)
    if not check(rc == 0, f"{name}: the converter refused the schema: {gbnf.strip()}"):
        return
    verdicts, err = match_all(gbnf, accept + reject)
    if not check(verdicts is not None, f"{name}: grammar_check failed: {err}\n{gbnf}"):
        return
    for text, v in zip(accept, verdicts):
        check(v.get("complete") is True, f"{name}: grammar refuses valid {text!r}")
    for text, v in zip(reject, verdicts[len(accept):]):
        check(v.get("complete") is False, f"{name}: grammar accepts invalid {text!r}")


def main():
    n_texts = 0
    for name, schema, valid, invalid in TABLE:
        for v in valid:
            check(valid_under(schema, v), f"table: {name}: {v!r} should be valid")
        for v in invalid:
            check(not valid_under(schema, v), f"table: {name}: {v!r} should be invalid")
        root = schema if isinstance(schema, dict) else {}
        accept = [t for v in valid for t in forms(order_like(v, schema, root))]
        reject = [t for v in invalid for t in forms(order_like(v, schema, root))]
        n_texts += len(accept) + len(reject)
        check_grammar(name, schema, accept, reject)

    # Pydantic reads back what the grammar lets a model write.
    for model, name in ((Person, "pydantic Person"), (Tree, "pydantic Tree"), (Reasoning, "pydantic Reasoning")):
        for _, _, valid, _ in (t for t in TABLE if t[0] == name):
            for v in valid:
                for text in forms(v):
                    try:
                        model.model_validate_json(text)
                    except Exception as e:  # noqa: BLE001 (any refusal is a failure)
                        check(False, f"{name}: pydantic refuses {text!r}: {e}")

    for schema, texts in REJECT:
        n_texts += len(texts)
        check_grammar(f"reject {json.dumps(schema)}", schema, [], texts)
    for schema, texts in NARROWER:
        for t in texts:
            check(valid_under(schema, json.loads(t)), f"narrower: {t!r} should be valid under {schema}")
        n_texts += len(texts)
        check_grammar(f"narrower {json.dumps(schema)}", schema, [], texts)

    for schema, needle in UNSUPPORTED:
        rc, out = convert(schema)
        err = json.loads(out).get("error", "") if rc == 2 else ""
        check(rc == 2 and needle in err, f"unsupported {json.dumps(schema)}: want an error naming {needle!r}, "
                                         f"got rc {rc}: {out.strip()[:200]}")

    print(f"{len(TABLE)} schemas, {n_texts} texts, {len(UNSUPPORTED)} refusals")
    return finish()


if __name__ == "__main__":
    sys.exit(main())

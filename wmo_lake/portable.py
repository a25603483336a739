"""The portable subset: SQL that DuckDB runs and that sqlglot transpiles to Spark SQL with the same
results. A lint over `sql/*.sql` (in `make lint` and the test suite):

    python -m wmo_lake.portable            # every sql/*.sql; exit 1 and one line per finding
    python -m wmo_lake.portable FILE...    # these files

Each rule names a DuckDB construct that sqlglot turns into Spark SQL that fails or, worse, runs
with a different answer (the ORDER BY of an ordered aggregate is dropped silently), and the
portable form to write instead. The views are DuckDB SQL; `wmo_lake.spark.transpile` adds just two
renames of its own: getvariable('x') -> the session variable x, error() -> raise_error().
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    why: str
    portable: str


def _rule(name: str, pattern: str, why: str, portable: str) -> Rule:
    return Rule(name, re.compile(pattern, re.IGNORECASE | re.DOTALL), why, portable)


RULES: list[Rule] = [
    _rule(
        "list_reduce",
        r"\b(list_reduce|array_reduce|reduce)\s*\(",
        "sqlglot does not map DuckDB's (list, lambda, initial) onto Spark's aggregate(list, "
        "initial, lambda)",
        "an order-free aggregate; for an exact float sum, split into whole units and remainders "
        "as rollout_stats does for graded_solve_rate",
    ),
    _rule(
        "hugeint",
        r"\b(u?hugeint|int128)\b",
        "Spark has no 128-bit integer",
        "CAST(x AS DECIMAL(38, 0))",
    ),
    _rule(
        "map_literal",
        r"\bmap\s*\{",
        "sqlglot writes MAP {} as MAP STRUCT(), which Spark cannot parse",
        "map_from_entries(list_sort(list({'k': k, 'v': v}))), or CAST(map() AS MAP(K, V)) "
        "for an empty one",
    ),
    _rule(
        "len",
        # (and length() of what is plainly a list: a literal, a list-returning function's
        # result; not array_to_string's, list_extract's or list_aggr's, whose may be text)
        r"\blen\s*\(|\blength\s*\(\s*(\[|(list|array)_(value|pack|transform|apply|filter"
        r"|sort|reverse_sort|distinct|concat|cat|slice|resize|append|prepend|push_back"
        r"|push_front|zip|select|where|grade_up|reverse|intersect)\s*\(|string_split\w*\s*\()",
        "len() becomes Spark's length(), which takes strings only",
        "array_length(list) (Spark: size), or length(text)",
    ),
    _rule(
        "list_resize",
        r"\b(list_resize|array_resize)\s*\(",
        "Spark has no list_resize",
        "list_transform(range(n), lambda i: value) (sqlglot guards n = 0)",
    ),
    _rule(
        "list_slice",
        r"\blist_slice\s*\(",
        "sqlglot writes list_slice unchanged, and Spark has none",
        "array_slice(x, 1, n) (Spark: slice(x, 1, n)), n >= 0",
    ),
    _rule(
        "slice_start",
        r"\barray_slice\s*\(\s*(?:[^(),]|\([^()]*\))+,(?!\s*1\s*,)\s*[^,]+,",
        "Spark's slice() takes (start, length): only a slice from 1 has the same end",
        "array_slice(x, 1, n)",
    ),
    _rule(
        "slice_syntax",
        r"[\w)\]]\s*\[[^\[\]{}'\n]*:[^\[\]{}'\n]*\]",
        "x[a:b] is written unchanged for Spark, which has no slice syntax",
        "array_slice(x, 1, n)",
    ),
    _rule(
        "any_value_filter",
        r"\bany_value\s*\((?:[^()]|\([^()]*\))*\)\s*filter\b",
        "Spark's any_value with FILTER does not ignore NULLs the way DuckDB's does",
        "max(CASE WHEN condition THEN x END) (for a value that is unique)",
    ),
    _rule(
        "to_json_scalar",
        r"\bto_json\s*\(\s*(?!\{)",
        "Spark's to_json takes a struct, map or array only",
        "to_json({'n': x}) with the '{\"n\":' prefix and the '}' cut off",
    ),
    _rule(
        "epoch",
        r"\bepoch(_ms|_us|_ns)?\s*\(|\bextract\s*\(\s*epoch\b|\bdate_part\s*\(\s*'epoch'",
        "Spark's unix_timestamp (sqlglot's epoch) has whole seconds",
        "CAST(date_diff('microsecond', a, b) AS DOUBLE) / 1000000.0",
    ),
    _rule(
        "isfinite",
        r"\b(isfinite|isinf|isnan)\s*\(",
        "Spark has no isfinite / isinf",
        "a range test (NaN and +-inf fail `x BETWEEN 0.0 AND 1.0`), or x = 'NaN'::DOUBLE",
    ),
    _rule(
        "list_sort_order",
        r"\b(list_sort|array_sort|list_reverse_sort)\s*\((?:[^()]|\([^()]*\))*,",
        "Spark's array_sort takes no order argument (and a comparator DuckDB does not take)",
        "list_sort(x) ascending; sort a key you negate for descending",
    ),
    _rule(
        "recursive_cte",
        r"\bwith\s+recursive\b",
        "Spark stops a recursive CTE at 100 levels (and older versions have none)",
        "a window (list(x) OVER (... ROWS UNBOUNDED PRECEDING)) or a join over the depth",
    ),
]

# An aggregate whose order is part of its result: sqlglot writes list(x ORDER BY k) as Spark's
# collect_list(x), dropping the ORDER BY without a warning.
ORDERED_AGGREGATE = Rule(
    "ordered_aggregate",
    re.compile(r"\b(\w+)\s*\(", re.IGNORECASE),
    "sqlglot drops an aggregate's ORDER BY for Spark (collect_list has no order)",
    "list_transform(list_sort(list({'key': k, 'value': x})), lambda e: e.value) "
    "(array_to_string(..., sep) for string_agg)",
)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: Rule
    text: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.rule.name}: `{self.text}` does not survive "
            f"transpiling to Spark ({self.rule.why}). Portable form: {self.rule.portable}"
        )


def _blank_comments(sql: str) -> str:
    """Comments replaced by spaces (line numbers and offsets kept); string literals untouched."""
    out = []
    i = 0
    while i < len(sql):
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = len(sql) if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif sql[i] == "'":
            end = i + 1
            while end < len(sql):
                if sql[end] == "'" and sql.startswith("''", end):
                    end += 2
                    continue
                if sql[end] == "'":
                    break
                end += 1
            out.append(sql[i : end + 1])
            i = end + 1
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


def _call_arguments(sql: str, open_paren: int) -> str:
    depth = 0
    for i in range(open_paren, len(sql)):
        if sql[i] == "(":
            depth += 1
        elif sql[i] == ")":
            depth -= 1
            if depth == 0:
                return sql[open_paren + 1 : i]
    return sql[open_paren + 1 :]


def _top_level(text: str) -> str:
    """`text` with every parenthesized part blanked out."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        out.append(ch if depth == 0 else " ")
        if ch == ")":
            depth -= 1
    return "".join(out)


def _ordered_aggregates(sql: str) -> Iterator[tuple[int, str]]:
    for match in ORDERED_AGGREGATE.pattern.finditer(sql):
        if match.group(1).upper() in {"OVER", "AS", "IN", "EXISTS", "VALUES"}:
            continue
        arguments = _call_arguments(sql, match.end() - 1)
        if re.search(r"\border\s+by\b", _top_level(arguments), re.IGNORECASE):
            yield match.start(), match.group(0) + arguments.strip()[:40] + "..."


def lint_text(sql: str, path: str = "<sql>") -> list[Finding]:
    """Every non-portable construct in one SQL text."""
    code = _blank_comments(sql)

    def line_of(offset: int) -> int:
        return code.count("\n", 0, offset) + 1

    findings = [
        Finding(path, line_of(m.start()), rule, " ".join(m.group(0).split()))
        for rule in RULES
        for m in rule.pattern.finditer(code)
    ]
    findings += [
        Finding(path, line_of(offset), ORDERED_AGGREGATE, " ".join(text.split()))
        for offset, text in _ordered_aggregates(code)
    ]
    return sorted(findings, key=lambda f: (f.line, f.rule.name))


def lint_files(paths: list[Path]) -> list[Finding]:
    return [f for p in paths for f in lint_text(p.read_text(encoding="utf-8"), str(p))]


def main(argv: list[str] | None = None) -> int:
    """Lint the given .sql files (default: every view in sql/); exit 1 on a finding."""
    from wmo_lake.lake import sql_dir

    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or sorted(sql_dir().glob("*.sql"))
    findings = lint_files(paths)
    for finding in findings:
        print(finding)
    if findings:
        print(f"{len(findings)} non-portable construct(s) in {len(paths)} file(s)", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

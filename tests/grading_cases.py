"""The behaviours where LiveCodeBench's runner, GLM-4.5's toolkit and pacs's judge differ, one case each:
a program, its tests and the verdict each profile gives (``code.grading``).

The graders' verdicts were worked out from their sources (LiveCodeBench/LiveCodeBench at 28fef95,
zai-org/glm-simple-evals at db7fdc8) and checked by running unmodified copies of both graders, outside the
project, on these same cases: `tests/cross_check_graders.py` (38 of 38 agree with each; the numpy case came
after, from both graders' ``==`` on ``np.int64``). A status names
pacs's verdict: the graders call ``timeout`` a time limit, ``runtime_error`` any exception, ``failed`` a
wrong answer.
"""

import json

TWO_SUMS = {"tests": [{"input": "1 2\n3 4\n", "output": "3\n7\n"}, {"input": "5 5\n1 1\n", "output": "10\n2\n"}]}
APPEND = {"fn_name": "f", "tests": [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"},
                                    {"input": "[]\n4", "output": "[4]", "testtype": "functional"}]}  # fmt: skip
LOOP = "for _ in range(2):\n    a, b = map(int, input().split())\n    print(a + b)\n"


def stdin(output: str, input: str = "\n") -> dict:
    return {"tests": [{"input": input, "output": output}]}


def functional(output, *args) -> dict:
    line = "\n".join(json.dumps(a) for a in args)
    return {"fn_name": "f", "tests": [{"input": line, "output": json.dumps(output), "testtype": "functional"}]}


P, F, E, T = "passed", "failed", "runtime_error", "timeout"
# (name, program, tests, {grading: status})
CASES = [
    # stdin: the graders' objects (LiveCodeBench a mock, GLM a StringIO); the judge, the real file
    ("stdin.input", LOOP, TWO_SUMS, {"judge": P, "livecodebench": P, "glm45": P}),
    (
        "stdin.iterate",
        "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": E, "glm45": P},
    ),
    (
        "stdin.buffer_readline",
        "import sys\ninput = sys.stdin.buffer.readline\n" + LOOP,
        TWO_SUMS,
        {"judge": P, "livecodebench": F, "glm45": E},
    ),  # LiveCodeBench's buffer gives the first line every time
    (
        "stdin.buffer_read",
        "import sys\nd = sys.stdin.buffer.read().split()\nprint(int(d[0]) + int(d[1]))\nprint(int(d[2]) + int(d[3]))\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": P, "glm45": E},
    ),
    (
        "stdin.open0",
        "d = open(0).read().split()\nprint(int(d[0]) + int(d[1]))\nprint(int(d[2]) + int(d[3]))\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": E, "glm45": E},
    ),  # `from builtins import *` binds the real open
    (
        "stdin.readlines",
        "import sys\nfor line in sys.stdin.readlines():\n    a, b = map(int, line.split())\n    print(a + b)\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": E, "glm45": P},
    ),  # a last "" line
    (
        "stdin.read_twice",
        "import sys\nsys.stdin.read()\nd = sys.stdin.read().split()\n"
        "print(int(d[0]) + int(d[1]))\nprint(int(d[2]) + int(d[3]))\n",
        TWO_SUMS,
        {"judge": E, "livecodebench": P, "glm45": E},
    ),  # LiveCodeBench's read() gives the whole input every time
    (
        "stdin.old_stdin",
        "from sys import stdin\nfor _ in range(2):\n    a, b = map(int, stdin.readline().split())\n    print(a + b)\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": P, "glm45": P},
    ),  # the patches land on it
    # stdout: a StringIO in both graders
    (
        "stdout.buffer",
        "import sys\nfor _ in range(2):\n    a, b = map(int, input().split())\n"
        "    sys.stdout.buffer.write(b'%d\\n' % (a + b))\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": E, "glm45": E},
    ),
    (
        "stdout.fd1",
        "import os\nfor _ in range(2):\n    a, b = map(int, input().split())\n    os.write(1, b'%d\\n' % (a + b))\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": F, "glm45": F},
    ),
    (
        "stdout.star_import",
        "for _ in range(2):\n    a, b = map(int, input().split())\n    stdout.write(f'{a + b}\\n')\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": F, "glm45": F},
    ),  # `from sys import *`'s stdout is not the capture
    # the top level wrapped in a function
    (
        "wrap.global",
        "total = 0\ndef add(x):\n    global total\n    total += x\nfor _ in range(2):\n"
        "    a, b = map(int, input().split())\n    add(0)\n    print(a + b + total)\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": E, "glm45": E},
    ),
    (
        "wrap.main_guard_last",
        "def main():\n"
        + "".join("    " + line + "\n" for line in LOOP.splitlines())
        + 'if __name__ == "__main__":\n    main()\n',
        TWO_SUMS,
        {"judge": P, "livecodebench": P, "glm45": P},
    ),
    (
        "wrap.main_guard_not_last",
        "def main():\n"
        + "".join("    " + line + "\n" for line in LOOP.splitlines())
        + "if __name__ == '__main__':\n    main()\nDONE = True\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": F, "glm45": F},
    ),  # the module is tmp_sol: the block never runs
    (
        "wrap.multiline_string",
        "HELP = '''a\nb'''\nfor _ in range(2):\n    a, b = map(int, input().split())\n"
        "    print(a + b + len(HELP) - 3)\n",
        TWO_SUMS,
        {"judge": P, "livecodebench": P, "glm45": F},
    ),  # GLM's tab
    # guards
    ("guard.quit", LOOP + "quit()\n", TWO_SUMS, {"judge": P, "livecodebench": E, "glm45": E}),
    ("guard.exit", LOOP + "exit()\n", TWO_SUMS, {"judge": P, "livecodebench": P, "glm45": E}),
    ("guard.resource", "import resource\n" + LOOP, TWO_SUMS, {"judge": P, "livecodebench": E, "glm45": E}),
    ("guard.getcwd", "import os\nos.getcwd()\n" + LOOP, TWO_SUMS, {"judge": P, "livecodebench": E, "glm45": E}),
    # comparing printed outputs
    (
        "compare.trailing_spaces",
        "print('3 ')\nprint('  7')\n",
        stdin("3\n7\n"),
        {"judge": P, "livecodebench": P, "glm45": P},
    ),
    (
        "compare.blank_line",
        "print(3)\nprint()\nprint(7)\n",
        stdin("3\n7\n"),
        {"judge": F, "livecodebench": F, "glm45": P},
    ),
    ("compare.inner_spaces", "print('1  2')\n", stdin("1 2\n"), {"judge": P, "livecodebench": P, "glm45": F}),
    (
        "compare.decimal_form",
        "print('1.0')\nprint('2.50')\n",
        stdin("1\n2.5\n"),
        {"judge": P, "livecodebench": P, "glm45": P},
    ),
    ("compare.close_float", "print(0.5000001)\n", stdin("0.5\n"), {"judge": F, "livecodebench": F, "glm45": P}),
    (
        "compare.close_negative_int",
        "print(-100000001)\n",
        stdin("-100000000\n"),
        {"judge": F, "livecodebench": F, "glm45": P},
    ),  # not digits, so np.allclose
    ("compare.close_int", "print(100000001)\n", stdin("100000000\n"), {"judge": F, "livecodebench": F, "glm45": F}),
    (
        "compare.two_numbers_a_line",
        "print('0.5000001 1')\n",
        stdin("0.5 1\n"),
        {"judge": F, "livecodebench": F, "glm45": F},
    ),
    # functional calls: one Solution for every test, Python's ==
    (
        "functional.plain",
        "class Solution:\n    def f(self, a, b):\n        return a + [b]\n",
        APPEND,
        {"judge": P, "livecodebench": P, "glm45": P},
    ),
    (
        "functional.class_state",
        "class Solution:\n    seen = []\n    def f(self, a, b):\n        self.seen.append(b)\n"
        "        return a + self.seen[:1]\n",
        APPEND,
        {"judge": P, "livecodebench": F, "glm45": F},
    ),
    (
        "functional.tuple",
        "class Solution:\n    def f(self, a, b):\n        return tuple(a + [b])\n",
        APPEND,
        {"judge": P, "livecodebench": P, "glm45": P},
    ),
    (
        "functional.inner_tuples",
        "class Solution:\n    def f(self, a):\n        return [tuple(a)]\n",
        functional([[1, 2]], [1, 2]),
        {"judge": P, "livecodebench": F, "glm45": F},
    ),
    (
        "functional.equal_not_json",
        "from fractions import Fraction\nclass Solution:\n    def f(self, a):\n        return Fraction(a)\n",
        functional(3, 3),
        {"judge": E, "livecodebench": P, "glm45": P},
    ),  # a numpy scalar's case
    (
        "functional.first_element",
        "class Solution:\n    def f(self, a):\n        return a\n",
        functional([5], 5),
        {"judge": F, "livecodebench": F, "glm45": P},
    ),  # GLM: == expected[0]
    (
        "functional.equals_everything",
        "class Everything:\n    def __eq__(self, other):\n        return True\n"
        "class Solution:\n    def f(self, a):\n        return Everything()\n",
        functional(7, 1),
        {"judge": E, "livecodebench": P, "glm45": P},
    ),
    (
        "functional.int_keys",
        "class Solution:\n    def f(self, d):\n        return sorted(d)[0] + 1\n",
        functional(2, {"1": 0}),
        {"judge": E, "livecodebench": E, "glm45": P},
    ),  # GLM makes a dict's keys ints
    (
        "functional.top_level_once",
        "calls = []\nclass Solution:\n    def f(self, a, b):\n        calls.append(1)\n"
        "        return a + [b] if len(calls) == 1 else a + [b, b]\n",
        APPEND,
        {"judge": P, "livecodebench": F, "glm45": F},
    ),
    # limits
    (
        "limit.digits",
        "print(10 ** 5000)\n",
        stdin("1" + "0" * 5000 + "\n"),
        {"judge": E, "livecodebench": P, "glm45": E},
    ),
    # modules (code.PACKAGES): the standard library, and under the graders' profiles numpy, which both graders'
    # environments have; sortedcontainers in none, whatever the machine has installed
    (
        "module.sortedcontainers",
        "from sortedcontainers import SortedList\n" + LOOP,
        TWO_SUMS,
        {"judge": E, "livecodebench": E, "glm45": E},
    ),
    (
        "module.numpy",
        "import numpy as np\nclass Solution:\n    def f(self, a):\n        return np.sum(a)\n",
        functional(6, [1, 2, 3]),
        {"judge": E, "livecodebench": P, "glm45": P},
    ),  # np.int64(6) == 6 in both graders
]

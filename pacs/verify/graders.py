"""How LiveCodeBench's runner and GLM-4.5's toolkit run one program on its tests, inside the sandbox.

The ``livecodebench`` and ``glm45`` grading profiles (``code.grading``) run here, in one child of the harness
that takes every test of a program in turn, as both graders do (one process per program: a ``Solution()``
made once, state carried from test to test). Written from reading their sources, not copied:

- LiveCodeBench/LiveCodeBench at 28fef95 (``lcb_runner/evaluation/testing_util.py``,
  ``compute_code_generation_metrics.py``);
- zai-org/glm-simple-evals at db7fdc8 (``utils/testing_utils.py``, ``evals/livecodebench_eval.py``).

What each reproduces: the program's top level wrapped in a function (LiveCodeBench: its statements moved
into ``wrapped_function`` by the syntax tree, imports left outside; GLM: each line indented by a tab under
``def code():``, lines starting ``import``/``from`` before the first other line left outside), a last
``if __name__ == '__main__':`` block unwrapped first; ``sys.stdin`` replaced by the grader's object while the
``read``/``readline``/``readlines`` patches land on the interpreter's own stdin (a /dev/null here, as in a
``multiprocessing`` child), ``open`` by ``unittest.mock.mock_open`` of the input; ``sys.stdout`` a
``StringIO``; the guards (``quit``, for GLM ``exit`` too, set to None, ``os``'s destructive functions and five
modules taken away); the digit limit (LiveCodeBench raises Python's int-to-str limit to 50,000); an alarm per
test that raises ``TimeoutException`` inside the program; and the functional call and its ``==``, run here
because a program's own ``__eq__`` decides it. Standard output is compared by the host (``code.py``).

Records go to fd 3: ``{"test", "status", "bytes"[, "passed"]}`` and ``bytes`` bytes of captured output
(stdin tests) or none (functional tests, ``passed`` decided here). Standard library only.
"""

import ast
import builtins
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import types
from contextlib import ExitStack
from unittest import mock

PROFILES = ("livecodebench", "glm45")
CHANNEL = 3
MAIN_GUARD = "__name__ == '__main__'"  # as ast.unparse writes the guard, in either quoting
OS_GUARDED = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
              "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
              "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")  # fmt: skip
MODULES_GUARDED = ("ipdb", "joblib", "resource", "psutil", "tkinter")


class TimeoutException(Exception):  # noqa: N818  (the graders' name: a program's `except Exception` catches it)
    pass


def lcb_alarm(signum, frame):
    print("timeout occured: alarm went off")  # into the captured output, where a program swallows the exception
    raise TimeoutException


def glm_alarm(signum, frame):
    raise TimeoutException


def guard(profile: str) -> None:
    """The graders' ``reliability_guard``: what they take away from a program, before it runs."""
    builtins.quit = None
    if profile == "glm45":
        builtins.exit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in OS_GUARDED:
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in MODULES_GUARDED:
        sys.modules[name] = None
    if profile == "livecodebench":
        sys.set_int_max_str_digits(50000)


def without_main_guard(code: str) -> str:
    """A last ``if __name__ == '__main__':`` block replaced by its body (both graders; other such blocks
    stay, and never run: the module is named ``tmp_sol``)."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == MAIN_GUARD:
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001  (unparsable, or empty: left as it is)
        pass
    return code


def lcb_wrapped(code: str, imports: str) -> str:
    """LiveCodeBench: top-level imports stay, every other statement becomes ``wrapped_function``'s body."""
    try:
        tree = ast.parse(code)
        hoisted = [s for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom)]
        body = [s for s in tree.body if not isinstance(s, ast.Import | ast.ImportFrom)]
        arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        function = ast.FunctionDef(name="wrapped_function", args=arguments, body=body, decorator_list=[], lineno=-1)
        return imports + "\n" + ast.unparse(hoisted) + "\n" + ast.unparse(function)
    except Exception:  # noqa: BLE001  (a syntax error: the program as it is, to fail when run)
        return code


def glm_wrapped(code: str) -> str:
    """GLM's toolkit: every line indented by a tab under ``def code():`` (preceded by ``stdin = sys.stdin``
    and ``stdout = sys.stdout``), from the first line that does not start with ``import``/``from``; such lines
    before it stay at the top, later ones are indented too."""
    out, started = [], False
    for line in code.split("\n"):
        if line.startswith(("from ", "import ")):
            out.append(("\t" if started else "") + line + "\n")
        elif started:
            out.append("\t" + line + "\n")
        else:
            out.append("stdin = sys.stdin\nstdout = sys.stdout\ndef code():\n\t" + line + "\n")
            started = True
    return "".join(out)


class LcbStdin:
    """LiveCodeBench's ``sys.stdin``: ``read()`` gives the whole input at every call, ``readline()`` reads on,
    ``readlines()`` splits at "\\n" (a last "" where the input ends with one), ``.buffer`` reads bytes but its
    ``readline()`` gives the first line at every call; anything else goes to a StringIO of the input, and it
    cannot be iterated (``for line in sys.stdin`` raises TypeError)."""

    def __init__(self, text: str):
        self.text = text
        self._io = io.StringIO(text)
        self.buffer = LcbStdinBuffer(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self._io.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self._io, name)


class LcbStdinBuffer:
    def __init__(self, text: str):
        self.data = text.encode("utf-8")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


def call_with_stdin(profile: str, method, text: str) -> None:
    """The graders' ``call_method``: the patches entered in their decorators' order (the innermost first, so
    the ``sys.stdin.*`` ones land on the interpreter's stdin before ``sys.stdin`` itself is replaced)."""
    lines = iter(text.split("\n"))
    stdin = LcbStdin(text) if profile == "livecodebench" else io.StringIO(text)
    patches = [("sys.stdin.read", lambda *a: text), ("sys.stdin.readlines", lambda *a: text.split("\n")),
               ("sys.stdin.readline", lambda *a: next(lines)), ("sys.stdin", stdin),
               ("builtins.open", mock.mock_open(read_data=text))]  # fmt: skip
    with ExitStack() as stack:
        for target, new in patches:
            stack.enter_context(mock.patch(target, new))
        try:
            method()
        except SystemExit:
            pass


def captured(profile: str, method, text: str) -> str:
    """``method`` run on ``text`` with ``sys.stdout`` a StringIO (whose ``close`` takes one argument and does
    nothing: ``sys.stdout.close()`` is a TypeError in both); what it printed."""
    saved = sys.stdout
    sys.stdout = out = io.StringIO()
    out.close = lambda x: 1
    try:
        call_with_stdin(profile, method, text)
    finally:
        sys.stdout = saved
    return out.getvalue()


def int_keys(value):
    """GLM: a dict's keys made ints (JSON's are strings), when they all convert."""
    return {int(k): v for k, v in value.items()}


def glm_value_matches(output, expected) -> bool:
    """GLM's functional comparison: ``==``, or ``==`` the expected list's first element, or a list of tuples
    as lists against that first element; True only when the result ``is`` not ``!= True``."""
    result = output == expected
    if isinstance(expected, list) and expected:
        result = result or (output == expected[0])
    try:
        if isinstance(output[0], tuple):
            result = result or ([list(x) for x in output] == expected[0])
    except Exception:  # noqa: BLE001
        pass
    return not (result != True)  # noqa: E712  (the toolkit's own test: a truthy 1 passes, "yes" does not)


def glm_arguments(args: list, expected):
    """GLM's conversions of JSON's string keys: a first argument that is a dict becomes the only argument;
    an expected dict, or a list whose first element is a dict, becomes a one-element list of that dict."""
    try:
        if isinstance(args[0], dict):
            args = [int_keys(args[0])]
    except Exception:  # noqa: BLE001
        pass
    try:
        if isinstance(expected, dict):
            expected = [int_keys(expected)]
    except Exception:  # noqa: BLE001
        pass
    try:
        if isinstance(expected[0], dict):
            expected = [int_keys(expected[0])]
    except Exception:  # noqa: BLE001
        pass
    return args, expected


def set_alarm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, seconds)


def failure(e: BaseException) -> str:
    if isinstance(e, MemoryError):
        return "memory"  # pacs's cap, a runtime error to the graders
    return "timeout" if "timeoutexception" in repr(e).lower() else "runtime_error"


def send(test: int, status: str, payload: bytes = b"", passed: bool | None = None) -> None:
    record = {"test": test, "status": status, "bytes": len(payload)}
    if passed is not None:
        record["passed"] = passed
    data = json.dumps(record).encode() + b"\n" + payload
    while data:
        data = data[os.write(CHANNEL, data) :]


def compiled(code: str, timeout: float, profile: str) -> types.ModuleType:
    """The program as the module ``tmp_sol``, its top level run under the alarm: in the module's own
    namespace (LiveCodeBench), or, as pyext's ``RuntimeModule.from_string`` does for GLM, in a fresh dict
    whose names are then copied into the module (there ``__name__`` is the builtins module's)."""
    module = types.ModuleType("tmp_sol", "")
    namespace = module.__dict__ if profile == "livecodebench" else {}
    set_alarm(timeout)
    try:
        exec(compile(code, "<program>", "exec"), namespace)
    finally:
        set_alarm(0)
    if namespace is not module.__dict__:
        module.__dict__.update((k, v) for k, v in namespace.items() if not k.startswith("__"))
    return module


def prepared(request: dict, profile: str, imports: str):
    """The callable each test calls: the wrapped stdin program, or the functional method (on one Solution)."""
    program, timeout = request["code"], request["timeout_s"]
    if request["fn_name"] is None:
        if profile == "livecodebench":
            module = compiled(lcb_wrapped(without_main_guard(program), imports), timeout, profile)
            return module.wrapped_function
        module = compiled(imports + glm_wrapped(without_main_guard(program)), timeout, profile)
        return module.code
    if profile == "livecodebench":
        module = compiled(imports + "\n\n" + program, timeout, profile)
    else:
        module = compiled(imports + "stdout = io.StringIO()\nsys.stdout=stdout\n" + program, timeout, profile)
    set_alarm(timeout)
    try:
        target = module.Solution() if "class Solution" in program else module
    finally:
        set_alarm(0)
    return getattr(target, request["fn_name"])


def run(request: dict, imports: str) -> None:
    """Every test of the program, in order, in this process; stops at the first that does not pass or
    fails to run (the host stops reading there too)."""
    profile = request["grading"]
    if profile == "glm45":
        imports = imports.replace("sys.setrecursionlimit(50000)", "sys.setrecursionlimit(6*10**5)")
    signal.signal(signal.SIGALRM, lcb_alarm if profile == "livecodebench" else glm_alarm)
    guard(profile)
    timeout = request["timeout_s"]
    try:
        method = prepared(request, profile, imports)
    except BaseException as e:  # noqa: BLE001  (the graders: a failed compile fails every test)
        return send(0, failure(e))
    for i, test in enumerate(request["tests"]):
        try:
            if request["fn_name"] is None:
                set_alarm(timeout)
                try:
                    output = captured(profile, method, test["input"])
                finally:
                    set_alarm(0)
                send(i, "ok", output.encode("utf-8", "surrogateescape"))
                continue
            args = [json.loads(line) for line in test["input"].split("\n")]
            expected = json.loads(test["output"])
            if profile == "glm45":
                args, expected = glm_arguments(args, expected)
            set_alarm(timeout)
            try:
                output = method(*args)
                set_alarm(0)
                if isinstance(output, tuple):
                    output = list(output)
                passed = glm_value_matches(output, expected) if profile == "glm45" else bool(output == expected)
            finally:
                set_alarm(0)
        except BaseException as e:  # noqa: BLE001
            return send(i, failure(e))
        send(i, "ok", passed=passed)
        if not passed:
            return None
    return None

"""Hostile programs against the code verifier, and what each may not do to the host.

Run as a script inside a PID namespace of its own (``unshare --pid --fork --mount-proc``: a ``kill(-1)``
or a fork bomb that got out would reach only that namespace), it judges every program at one isolation
level and prints one JSON line per program: the verdict, the processes left in the namespace after it,
and whether the verifier still judges a correct program right. The test (test_code_sandbox.py) holds the
listener, the secret files and the planted expected outputs, and checks the host after.

    python tests/hostile_programs.py --level limits --port P --secret-file F --plant-dir D --escape-dir E
"""

import argparse
import json
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pacs.verify.code import CodeConfig, CodeTest, CodeTests, run_program  # noqa: E402
from pacs.verify.sandbox import become_subreaper, kill_descendants  # noqa: E402

SECRET_ENV = "PACS_HOSTILE_SECRET"
PLANT_MARK = "PACS-EXPECTED-"  # the planted expected output starts with this
RUN_UNTIL_STOPPED = {"infinite loop", "fork bomb"}  # the programs that run until their time is up
# the program whose run the verifier gives up on (its budget ends) while the harness still waits for it
ABANDONED = "processes past the verifier's deadline"


def programs(port: int, secret_file: str, plant_dir: str, escape_dir: str, secret: str, planted: str) -> list:
    """``(name, program, tests)``: each program's expected output is what it could only print by escaping."""
    stdin = CodeTests((CodeTest("1 2", "3", "stdin"),), None)
    functional = CodeTests((CodeTest("[1, 2]", "[1, 2]", "functional"),), "f")
    wants = {
        "secret": CodeTests((CodeTest("", secret, "stdin"),), None),
        "planted": CodeTests((CodeTest("", planted, "stdin"),), None),
    }
    return [
        ("infinite loop", "while True:\n    pass", stdin),
        ("fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", stdin),
        ("memory hog", "x = []\nwhile True:\n    x.append(bytearray(1 << 24))", stdin),
        ("endless output", "while True:\n    print('x' * 65536)", stdin),
        (
            "connect to the host",
            f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), 2)\ns.sendall(b'escaped')\nprint(3)",
            stdin,
        ),  # fmt: skip
        # judged on the host: no file appears (inside bubblewrap, /tmp and / are the sandbox's own)
        (
            "write outside its directory",
            f"import os\nfor d in ({escape_dir!r}, '/tmp', '/root', '/home'):\n"
            "    try:\n        open(os.path.join(d, 'pacs-escaped'), 'w').write('x')\n"
            "    except OSError:\n        pass\nprint(0)",
            stdin,
        ),  # fmt: skip
        ("secret from the environment", f"import os\nprint(os.environ.get({SECRET_ENV!r}, ''))", wants["secret"]),
        ("secret from a home file", f"print(open({secret_file!r}).read().strip())", wants["secret"]),
        (
            "search the disk for expected outputs",
            f"import os\nfor root in ({plant_dir!r}, '/tmp', '/work', '/home', '/root'):\n"
            "    for d, _, files in os.walk(root):\n        for f in files:\n            try:\n"
            "                t = open(os.path.join(d, f), errors='ignore').read(1 << 16)\n"
            "            except OSError:\n                continue\n"
            f"            if {PLANT_MARK!r} in t:\n                print(t.strip())\n                raise SystemExit",
            wants["planted"],
        ),  # fmt: skip
        ("kill its parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)", stdin),
        (
            "kill the verifier",
            "import os, signal\nppid = int(open(f'/proc/{os.getppid()}/stat').read().split()[3])\n"
            "os.kill(ppid, signal.SIGKILL)\nprint(3)",
            stdin,
        ),  # fmt: skip
        ("kill(-1)", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(3)", stdin),
        (
            "object equal to everything",
            "class E:\n    def __eq__(self, other):\n        return True\n"
            "class Solution:\n    def f(self, a, b):\n        return E()",
            functional,
        ),  # fmt: skip
        ("early exit", "import sys\nsys.exit(0)\nprint(3)", stdin),
        ("early exit, functional", "class Solution:\n    def f(self, a, b):\n        exit(0)", functional),
        # each of these prints 3, the expected output, only when its attack worked
        (
            "write the harness's memory",
            "import os\nok = 0\nfor pid in (os.getppid(), 1):\n    try:\n"
            "        open(f'/proc/{pid}/mem', 'r+b').close()\n        ok = 3\n"
            "    except OSError:\n        pass\nprint(ok)",
            stdin,
        ),  # fmt: skip
        (
            "write the harness's pipe to the host",
            "import os\ntry:\n    open(f'/proc/{os.getppid()}/fd/1', 'wb')"
            ".write(b'{}')\n    print(3)\nexcept OSError:\n    print(0)",
            stdin,
        ),  # fmt: skip
        (
            "signal another process through F_SETOWN",
            "import fcntl, os\nr, w = os.pipe()\ntry:\n"
            "    fcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())\n    print(3)\n"
            "except OSError:\n    print(0)",
            stdin,
        ),  # fmt: skip
        (
            "fill memory or disk through files",
            "import os\nwrote = 0\nfor d in ('/', '/dev/shm', '/sandbox', '.'):\n"
            "    wrote = 0\n    for i in range(160):\n        try:\n"
            "            with open(os.path.join(d, f'fill{i}'), 'wb') as f:\n"
            "                f.write(bytes(1 << 20))\n            wrote += 1\n"
            "        except OSError:\n            break\n    if wrote > 128:\n        break\n"
            "print(3 if wrote > 128 else 0)",
            stdin,
        ),  # fmt: skip
        (
            "a daemon outliving the test",
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(60)\n    os._exit(0)\nprint(0)",
            stdin,
        ),  # fmt: skip
        (
            ABANDONED,
            "import os, time\nfor _ in range(2):\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass\ntime.sleep(60)",
            stdin,
        ),  # fmt: skip
    ]


GOOD = ("a, b = map(int, input().split())\nprint(a + b)", CodeTests((CodeTest("1 2", "3", "stdin"),), None))


def others() -> list[int]:
    """The namespace's processes other than this one (with --mount-proc, /proc shows only them)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
            and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--level", "--secret-file", "--plant-dir", "--escape-dir", "--secret", "--planted"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    become_subreaper()
    isolation, filters = {"bubblewrap": ("bubblewrap", True), "limits+filters": ("limits", True),
                          "limits": ("limits", False)}[args.level]  # fmt: skip
    # the programs that run until stopped get a second; every other one, and the correct program after each, ten:
    # on a busy CI machine the memory hog once had not reached its memory limit within a second (judged timeout)
    quick, patient = (CodeConfig(timeout_s=t, memory_mb=256, output_mb=1, isolation=isolation, filters=filters)
                      for t in (1.0, 10.0))  # fmt: skip
    # the verifier stops reading after a second and kills the sandbox: the program's processes (four where
    # forking is allowed), in a session of their own, must die with it
    abandoned = replace(patient, budget_s=1.0)
    os.environ[SECRET_ENV] = args.secret  # the verifier's own environment holds it; programs must not see it
    for name, program, tests in programs(args.port, args.secret_file, args.plant_dir, args.escape_dir,
                                         args.secret, args.planted):  # fmt: skip
        config = abandoned if name == ABANDONED else quick if name in RUN_UNTIL_STOPPED else patient
        verdict = run_program(program, tests, config)
        time.sleep(0.2)  # anything that escaped has had time to show itself
        left = len(others())
        kill_descendants()
        good = run_program(*GOOD, patient)
        record = {"program": name, "status": verdict.status, "isolation": verdict.isolation, "left_behind": left,
                  "verifier_goes_on": good.status == "passed"}  # fmt: skip
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()

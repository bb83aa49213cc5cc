"""The failure bookkeeping the Python checks share: check() records and prints
a failure without stopping, finish() reports and gives the exit code."""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def finish():
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("OK")
    return 0

#!/usr/bin/env python3
"""Checks scripts/packaging without a Docker engine.

docker-compose.yml parses and names the services check, ps0, worker0,
worker1 and tensorboard; every task waits for the check service (traind
check of both specs, the same mounts) to succeed; every traind service's
TRAIND_JOB / TRAIND_TASK is a task of cluster-compose.yaml whose host is
that service's name, and every task of the spec has its service; every
task's log is rotated; the Dockerfile's runtime stage installs the Debian
package of every shared library traind links (readelf -d, ldd, dpkg -S).

    test/compose_test.py build/daemon/traind

Exits 77 (skipped) where python3 lacks PyYAML.
"""
import os
import re
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("compose_test: skipped: python3 has no PyYAML (python3-yaml)")
    sys.exit(77)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PACKAGING = os.path.join(SOURCE, "scripts", "packaging")
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def load(name):
    with open(os.path.join(PACKAGING, name)) as f:
        return yaml.safe_load(f)


def check_compose():
    compose = load("docker-compose.yml")
    spec = load("cluster-compose.yaml")
    services = compose["services"]
    check(set(services) == {"check", "ps0", "worker0", "worker1", "tensorboard"},
          f"services: expected check, ps0, worker0, worker1, tensorboard, got {sorted(services)}")
    # The check service reads both specs and the data as the tasks will,
    # once, and every task waits for it to succeed.
    checker = services.get("check", {})
    command = checker.get("command", [])
    check(command[:1] == ["check"] and "/etc/traind/model.yaml" in command
          and "/etc/traind/cluster.yaml" in command,
          f"check: expected traind check of both specs, got {command}")
    check(str(checker.get("restart")) == "no", "check: restarted (a wrong spec stays wrong)")
    check(checker.get("image") == "traind:latest", "check: not the one traind image")
    # The first service created builds the image: docker-compose v1 pulls
    # the image of a service without a build section, and traind has none.
    check(checker.get("build", {}).get("target") == "runtime",
          "check: does not build the traind image (docker-compose v1 would pull it)")
    tasks = {}  # (job, task) -> host
    for job, addresses in spec["cluster"].items():
        for index, address in enumerate(addresses):
            tasks[(job, index)] = address.rsplit(":", 1)[0]
    served = set()
    for name, service in services.items():
        environment = service.get("environment", {})
        if "TRAIND_JOB" not in environment:
            continue
        key = (environment["TRAIND_JOB"], int(environment["TRAIND_TASK"]))
        check(key in tasks, f"{name}: {key[0]} {key[1]} is not a task of cluster-compose.yaml")
        check(tasks.get(key) == name,
              f"{name}: cluster-compose.yaml puts {key[0]} {key[1]} on '{tasks.get(key)}'")
        check(key not in served, f"{name}: {key[0]} {key[1]} has two services")
        served.add(key)
        # The healthcheck asks the ops server where it listens: the task's
        # http address, not localhost.
        ops = spec["http"][key[0]][key[1]]
        check(environment.get("TRAIND_OPS") == ops,
              f"{name}: TRAIND_OPS is {environment.get('TRAIND_OPS')}, its ops address {ops}")
        check("TRAIND_OPS" in " ".join(service["healthcheck"]["test"]),
              f"{name}: the healthcheck does not ask TRAIND_OPS")
        volumes = " ".join(service.get("volumes", []))
        for target in ("/etc/traind/cluster.yaml", "/etc/traind/model.yaml", "/usr/share/datasets"):
            check(target in volumes, f"{name}: nothing mounted on {target}")
        check(service.get("image") == "traind:latest", f"{name}: not the one traind image")
        check(set(checker.get("volumes", [])) <= set(service.get("volumes", [])),
              f"{name}: mounts other specs or data than the check service read")
        # A task runs for weeks: its log must not fill the host's disk.
        logging = service.get("logging", {})
        check(logging.get("driver") == "json-file"
              and {"max-size", "max-file"} <= set(logging.get("options", {})),
              f"{name}: its log is not rotated (logging: json-file with max-size, max-file)")
        waits_for = service.get("depends_on", {})
        check(isinstance(waits_for, dict) and waits_for.get("check", {}).get("condition")
              == "service_completed_successfully",
              f"{name}: does not wait for the check service to succeed")
    for key in tasks:
        check(key in served, f"{key[0]} {key[1]} of cluster-compose.yaml has no service")
    check("/var/lib/traind" in " ".join(services["worker0"]["volumes"]),
          "worker0 (the chief): no checkpoints volume")
    check("summaries" in " ".join(services["tensorboard"]["command"]),
          "tensorboard: not reading the summaries")
    check(set(compose.get("volumes", {})) >= {"checkpoints"}, "no checkpoints volume")


def runtime_packages():
    with open(os.path.join(PACKAGING, "Dockerfile")) as f:
        text = f.read()
    block = re.search(r"# runtime-packages-begin\n(.*?)# runtime-packages-end", text, re.S)
    check(block is not None, "Dockerfile: no runtime-packages-begin/end block")
    if not block:
        return set()
    after_install = block.group(1).split("--no-install-recommends", 1)[-1]
    words = re.findall(r"[a-z0-9][a-z0-9.+-]+", after_install.split("&&")[0])
    return set(words)


def check_runtime_libraries(traind):
    for tool in ("readelf", "ldd", "dpkg"):
        if shutil.which(tool) is None:
            print(f"compose_test: no {tool}: the Dockerfile's library list is not checked")
            return
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]",
                        subprocess.run(["readelf", "-d", traind], capture_output=True,
                                       text=True, check=True).stdout)
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(
        ["ldd", traind], capture_output=True, text=True, check=True).stdout, re.M))
    packages = runtime_packages()
    for library in needed:
        path = os.path.realpath(paths.get(library, library))
        owner = None
        for candidate in (path, path.removeprefix("/usr")):
            found = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if found.returncode == 0:
                owner = found.stdout.split(":")[0]
                break
        if owner is None:
            print(f"compose_test: {library} ({path}) belongs to no package; not checked")
            continue
        check(owner in packages,
              f"Dockerfile: traind links {library}, of package {owner}, "
              f"which the runtime stage does not install")
        print(f"compose_test: {library}: {owner}")


def main():
    check_compose()
    if len(sys.argv) > 1:
        check_runtime_libraries(sys.argv[1])
    for failure in failures:
        print("compose_test: FAIL:", failure)
    if not failures:
        print("compose_test: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

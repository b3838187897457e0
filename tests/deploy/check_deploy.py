#!/usr/bin/env python3
"""The deployment examples in deploy/ against the code.

  check_deploy.py systemd REPO KVLM   the units pass `systemd-analyze verify`
                                      (with KVLM standing in for
                                      /usr/local/bin/kvlm), and every kvlm
                                      command line they run parses
  check_deploy.py kubernetes REPO KVLM the manifest parses as YAML; services
                                      select pods that exist and reach their
                                      ports; probes ask /health on a container
                                      port; every kvlm command line parses

A command line "parses" when kvlm accepts its flags (KVLM_PARSE_ONLY=1: it
stops right after parsing them, before opening anything).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def parses(kvlm, argv, where):
    env = dict(os.environ, KVLM_PARSE_ONLY="1")
    r = subprocess.run([kvlm] + argv, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        fail(f"{where}: kvlm {' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")


def read_env(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k] = v
    return env


def check_systemd(repo, kvlm):
    src = os.path.join(repo, "deploy", "systemd")
    env = read_env(os.path.join(src, "kvlm.env"))
    tmp = tempfile.mkdtemp(prefix="kvlm-units-")
    try:
        env_path = os.path.join(tmp, "kvlm.env")
        shutil.copy(os.path.join(src, "kvlm.env"), env_path)
        units = []
        for name in sorted(os.listdir(src)):
            if not name.endswith(".service"):
                continue
            text = open(os.path.join(src, name)).read()
            for m in re.finditer(r"^ExecStart=/usr/local/bin/kvlm (.*)$", text, re.M):
                # systemd's expansion: ${VAR} from the environment file, %i the instance.
                line = re.sub(r"\$\{(\w+)\}", lambda v: env.get(v.group(1), ""), m.group(1)).replace("%i", "8101")
                parses(kvlm, line.split(), name)
            text = text.replace("/usr/local/bin/kvlm", kvlm).replace("/etc/kvlm/kvlm.env", env_path)
            open(os.path.join(tmp, name), "w").write(text)
            units.append(name.replace("@.service", "@8101.service"))
        if len(units) < 3:
            fail(f"expected units for redis, the router and the workers in {src}, found {units}")
        r = subprocess.run(["systemd-analyze", "verify", "--man=no"] + units, cwd=tmp, capture_output=True, text=True)
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or out:
            fail(f"systemd-analyze verify {' '.join(units)}: exit {r.returncode}\n{out}")
        print(f"systemd: {len(units)} units verify and their kvlm lines parse")
    finally:
        shutil.rmtree(tmp)


def kvlm_args(container):
    cmd = container.get("command", []) + container.get("args", [])
    if not cmd or cmd[0] != "kvlm":
        return None
    return [re.sub(r"\$\((\w+)\)", "10.0.0.7", a) for a in cmd[1:]]  # $(POD_IP) as Kubernetes expands it


def check_pod(spec, name, kvlm):
    ports = set()
    for c in spec["containers"]:
        cports = {p["containerPort"] for p in c.get("ports", [])}
        cports |= {p["name"] for p in c.get("ports", []) if "name" in p}
        ports |= cports
        for probe in ("readinessProbe", "livenessProbe"):
            get = c.get(probe, {}).get("httpGet")
            if get and (get["path"] != "/health" or get["port"] not in cports):
                fail(f"{name}/{c['name']}: {probe} must ask /health on a container port, got {get}")
        args = kvlm_args(c)
        if args is not None:
            parses(kvlm, args, f"{name}/{c['name']}")
    return ports


def check_kubernetes(repo, kvlm):
    import yaml  # python3-yaml (scripts/setup.sh)
    path = os.path.join(repo, "deploy", "kubernetes", "kvlm.yaml")
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = [d for d in docs if d["kind"] == "Service"]
    if set(deployments) != {"kvlm-redis", "kvlm-worker", "kvlm-router"}:
        fail(f"expected the redis, worker and router deployments, found {sorted(deployments)}")
    pod_ports = {}
    for name, d in deployments.items():
        spec = d["spec"]
        if spec["selector"]["matchLabels"].items() - spec["template"]["metadata"]["labels"].items():
            fail(f"{name}: its selector does not select its own pods")
        pod_ports[name] = (spec["template"]["metadata"]["labels"], check_pod(spec["template"]["spec"], name, kvlm))
    for s in services:
        sel = s["spec"]["selector"]
        targets = [ports for labels, ports in pod_ports.values() if not sel.items() - labels.items()]
        if not targets:
            fail(f"service {s['metadata']['name']} selects no pod")
        for p in s["spec"]["ports"]:
            if p["targetPort"] not in targets[0]:
                fail(f"service {s['metadata']['name']}: target port {p['targetPort']} is no container port")
    worker = " ".join(kvlm_args(deployments["kvlm-worker"]["spec"]["template"]["spec"]["containers"][0]))
    router = " ".join(kvlm_args(deployments["kvlm-router"]["spec"]["template"]["spec"]["containers"][0]))
    for flag in ("--register redis://kvlm-redis:6379", "--advertise http://10.0.0.7:8080", "--kv-events"):
        if flag not in worker:
            fail(f"the workers must run with {flag}: {worker}")
    if "--registry redis://kvlm-redis:6379" not in router:
        fail(f"the router must watch the registry: {router}")
    print(f"kubernetes: {len(docs)} objects; services reach their pods; kvlm lines parse")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("systemd", "kubernetes"):
        sys.exit(__doc__)
    what, repo, kvlm = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
    check_systemd(repo, kvlm) if what == "systemd" else check_kubernetes(repo, kvlm)


if __name__ == "__main__":
    main()

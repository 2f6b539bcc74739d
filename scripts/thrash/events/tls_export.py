"""A point-in-time NBD export over TCP, only with TLS, under write load: `export-begin` on a
free loopback port with `--tls-creds` (a CA, a server's and a client's certificates made once by
`openssl`, QEMU's `tls-creds-x509` layout), `nbdinfo` without TLS refused, `nbdinfo` with it
answering the disk's size, a full read with `nbdcopy` over TLS, `export-end`. The copy is then
checked as `export`'s: each block at least as flushed before the request, at most as written by
the reply."""

import json
import os
import socket
import subprocess

from ..checks import BLOCK, check_snapshot
from ..common import BLOCKS, broken, log

# `path=` disks an export serves (an encrypted disk's is refused).
DISKS = ["plain", "thin", "track"]


def tls_export(t):
    name = t.rng.choice(DISKS)
    creds = make_creds(t)
    if creds is None:
        return
    server, client = creds
    backup = t.path(f"snap/{name}.tls-backup")
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map(name)
    port = begin(t, name, server)
    if port is None:
        return
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map(name)
    address = f"tcp:127.0.0.1:{port}"
    uri = f"nbds://127.0.0.1:{port}/?tls-certificates={client}"
    try:
        read(t, name, port, uri, backup)
    finally:
        t.ctl("export-end", t.sock(name), address)
    if not os.path.exists(backup):
        return
    if broken("tls-export"):  # one flushed block of the copy made stale
        corrupt(backup, low)
    bad = check_snapshot(backup, BLOCKS, low, high)
    if bad:
        t.error(f"TLS export of {name}: {bad}")
    else:
        log(f"TLS export of {name}: plain NBD refused, read by nbdcopy over TLS, "
            f"{len(high)} written blocks as due")
    os.unlink(backup)


def read(t, name, port, uri, backup):
    plain = run(["nbdinfo", f"nbd://127.0.0.1:{port}/"])
    if plain is None or plain.returncode == 0:
        t.error(f"TLS export of {name}: a client without TLS was not refused")
        return
    info = run(["nbdinfo", "--json", uri])
    if info is None or info.returncode != 0:
        t.error(f"TLS export of {name}: nbdinfo over TLS: "
                + ("no end" if info is None else info.stderr.strip()))
        return
    size = json.loads(info.stdout)["exports"][0]["export-size"]
    if size < BLOCKS * BLOCK:
        t.error(f"TLS export of {name}: nbdinfo says {size} bytes")
        return
    copy = run(["nbdcopy", uri, backup])
    if copy is None or copy.returncode != 0:
        t.error(f"nbdcopy over TLS of {name}'s export: "
                + ("no end in 300 s" if copy is None else copy.stderr.strip()))
        if os.path.exists(backup):
            os.unlink(backup)


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None


def begin(t, name, server):
    """`export-begin` on a free loopback port (tried again if another process took it)."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        began = t.ctl("export-begin", t.sock(name), f"tcp:127.0.0.1:{port}",
                      "--tls-creds", server, ok=False)
        if began is None:
            return None
        if began.returncode == 0:
            return port
        if "in use" not in began.stderr:
            t.error(f"TLS export-begin of {name}: {began.stderr.strip()}")
            return None
    t.error("TLS export-begin: no free port in 20 tries")
    return None


def corrupt(path, flushed):
    """Writes generation 0 over the first flushed block of the copy at `path`."""
    block = min(flushed, default=0)
    with open(path, "r+b") as f:
        f.seek(block * BLOCK)
        f.write(bytes(BLOCK))


def make_creds(t):
    """The server's and the client's credential directories, made on the first call."""
    root = t.path("tls")
    server, client = os.path.join(root, "server"), os.path.join(root, "client")
    if os.path.exists(os.path.join(client, "client-cert.pem")):
        return server, client
    ca = os.path.join(root, "ca")
    try:
        os.makedirs(ca, exist_ok=True)
        openssl(ca, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-keyout", "ca-key.pem", "-out", "ca-cert.pem", "-days", "2",
                "-subj", "/CN=vbmq-thrash-ca",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        issue(ca, server, "server")
        issue(ca, client, "client")
    except subprocess.CalledProcessError as e:
        t.error(f"openssl: {e.stderr.strip()}")
        return None
    return server, client


def issue(ca, directory, kind):
    os.makedirs(directory, exist_ok=True)
    usage = ("extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
             if kind == "server" else "extendedKeyUsage=clientAuth\n")
    with open(os.path.join(directory, "ext.cnf"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                f"keyUsage=critical,digitalSignature,keyEncipherment\n{usage}")
    openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{kind}-key.pem", "-out", "req.csr", "-subj", f"/CN=vbmq-thrash-{kind}")
    openssl(directory, "x509", "-req", "-in", "req.csr", "-CA", os.path.join(ca, "ca-cert.pem"),
            "-CAkey", os.path.join(ca, "ca-key.pem"), "-set_serial", "2",
            "-out", f"{kind}-cert.pem", "-days", "2", "-extfile", "ext.cnf")
    with open(os.path.join(ca, "ca-cert.pem"), "rb") as src, \
            open(os.path.join(directory, "ca-cert.pem"), "wb") as dst:
        dst.write(src.read())


def openssl(directory, *args):
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True,
                   text=True)

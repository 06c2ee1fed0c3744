"""A small HAProxy for tests: its Runtime API on a unix socket (the commands the rollout uses, with HAProxy 2.6's
reply formats), servers whose sessions end one per ``show stat`` while they drain, with an administrative state
(ready, drain, maint) and a health state apart, as HAProxy has them: a server leaves maintenance in the health it
had before (no check has run yet), a health forced down rises after ``rise`` passing looks, a failing server falls
(``UP 1/3``, then ``DOWN``); plus an SSH session stand-in that runs commands in a local shell."""

from __future__ import annotations

import socketserver
import subprocess
import threading
from dataclasses import dataclass, field

#: ``show stat`` columns of HAProxy 2.6, up to check_health (the CSV goes on with more; parsed by name).
STAT_COLUMNS = ("pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,"
                "status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,"
                "type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,"
                "hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,"
                "comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,"
                "agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health").split(",")
STATE_COLUMNS = ("be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
                 "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
                 "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord")


@dataclass
class Server:
    weight: int = 1
    iweight: int = 1
    admin: str = "ready"  # ready, drain, maint
    health: str = "UP"  # UP, "UP 1/3" (falling), DOWN
    scur: int = 0
    rising: int = 0  # passing looks until UP after its health went down
    healthy: bool = True  # False: its checks never pass
    stale: bool = False  # left maintenance, no check since: the old health still shows

    @property
    def status(self) -> str:
        """``show stat``'s status column."""
        if self.admin == "maint":
            return "MAINT"
        if self.health == "DOWN":
            return "DOWN"
        return "DRAIN" if self.admin == "drain" else self.health

    @status.setter
    def status(self, value: str) -> None:  # a test's shorthand
        self.admin = {"MAINT": "maint", "DRAIN": "drain"}.get(value, "ready")
        self.health = "DOWN" if value == "DOWN" else "UP"


@dataclass
class FakeHAProxy:
    servers: dict[tuple[str, str], Server] = field(default_factory=dict)
    rise: int = 2
    log: list[str] = field(default_factory=list)

    def add(self, name: str, weight: int = 1, scur: int = 0, backends=("triton_http", "triton_grpc")) -> None:
        for b in backends:
            self.servers[(b, name)] = Server(weight, weight, scur=scur)

    def handle(self, line: str) -> str:
        return "".join(self.one(cmd.strip()) for cmd in line.split(";") if cmd.strip())

    def one(self, cmd: str) -> str:
        self.log.append(cmd)
        words = cmd.split()
        if cmd == "show stat":
            return self.show_stat()
        if cmd == "show servers state":
            return self.show_servers_state()
        if words[:2] == ["set", "server"] and len(words) == 5:
            backend, _, name = words[2].partition("/")
            srv = self.servers.get((backend, name))
            if srv is None:
                return "No such server.\n\n" if any(b == backend for b, _ in self.servers) else "No such backend.\n\n"
            if words[3] == "state" and words[4] in ("ready", "drain", "maint"):
                if srv.admin == "maint" and words[4] != "maint":
                    srv.stale = True  # as a real HAProxy: the health it had, until the next check says
                srv.admin = words[4]
                return "\n"
            if words[3] == "health" and words[4] in ("up", "down", "stopping"):
                if srv.admin != "maint":  # HAProxy 2.6 ignores a forced health in maintenance
                    srv.health = "DOWN" if words[4] == "down" else "UP"
                    srv.rising = self.rise if words[4] == "down" else 0
                return "\n"
            if words[3] == "weight":
                try:
                    w = int(words[4])
                except ValueError:
                    return "Require <weight> or <weight%>.\n\n"
                if not 0 <= w <= 256:
                    return "Absolute weight can only be between 0 and 256 inclusive.\n\n"
                srv.weight = w
                return "\n"
        return "Unknown command, but maybe one of the following ones is a better match:\n  help\n\n"

    def show_stat(self) -> str:
        rows = ["# " + ",".join(STAT_COLUMNS)]
        for backend in dict.fromkeys(b for b, _ in self.servers):
            rows.append(self._row(backend, "FRONTEND", {"status": "OPEN"}))
            for (b, name), srv in self.servers.items():
                if b != backend:
                    continue
                if srv.status in ("DRAIN", "MAINT") and srv.scur:
                    srv.scur -= 1  # sessions end one per look
                if srv.admin == "maint":
                    pass  # no checks in maintenance
                elif srv.stale:  # the first look after leaving maintenance: no check has run yet
                    srv.stale = False
                elif srv.health == "DOWN" and srv.healthy:
                    srv.rising -= 1
                    if srv.rising <= 0:
                        srv.health = "UP"
                elif srv.health.startswith("UP") and not srv.healthy:  # fall: UP 1/3, then DOWN
                    srv.health = "DOWN" if srv.health == "UP 1/3" else "UP 1/3"
                check = ("L7OK", "200", "Layer7 check passed") if srv.healthy else (
                    "L4CON", "", "Connection refused")
                rows.append(self._row(b, name, {"status": srv.status, "weight": str(srv.weight), "scur": str(srv.scur),
                                                "check_status": check[0], "check_code": check[1],
                                                "check_desc": check[2], "type": "2"}))
            rows.append(self._row(backend, "BACKEND", {"status": "UP", "type": "1"}))
        return "\n".join(rows) + "\n\n"

    @staticmethod
    def _row(pxname: str, svname: str, values: dict[str, str]) -> str:
        return ",".join({"pxname": pxname, "svname": svname, **values}.get(c, "") for c in STAT_COLUMNS)

    def show_servers_state(self) -> str:
        rows = ["1", "# " + STATE_COLUMNS]
        ids = {b: i for i, b in enumerate(dict.fromkeys(b for b, _ in self.servers), 3)}
        for n, ((b, name), srv) in enumerate(self.servers.items(), 1):
            op = 0 if srv.admin == "maint" or srv.health == "DOWN" else 2
            admin = {"maint": 1, "drain": 8}.get(srv.admin, 0)
            rows.append(f"{ids[b]} {b} {n} {name} 10.0.0.{n} {op} {admin} {srv.weight} {srv.iweight} 5 6 3 4 6 0 0 0 "
                        "- 8000 -")
        return "\n".join(rows) + "\n\n"

    def serve(self, path: str) -> socketserver.UnixStreamServer:
        """The Runtime API on unix socket ``path`` (non-interactive: one line of commands, the replies, close)."""
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline().decode()
                with lock:
                    self.wfile.write(fake.handle(line).encode())

        lock = threading.Lock()
        server = socketserver.ThreadingUnixStreamServer(path, Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


class LocalSession:
    """:class:`tritonfleet.access.ssh.Session` stand-in: runs the command in a local shell (as the host would)."""

    def __init__(self, name: str, sent: list):
        self.name, self.sent = name, sent

    def run(self, command, *, stdin=None, timeout=30, root=False):
        self.sent.append((self.name, command, root))
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr

    def close(self):
        pass

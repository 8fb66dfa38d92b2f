#!/usr/bin/env bash
# files.sh - what another local user, or a hostile file, can do through the
# files dtrain reads and writes:
#  - a FIFO given as a checkpoint, a parameter file, a metrics log, a host
#    file or DTRAIN_SECRET_FILE is refused at once, by name (each used to
#    hang in open(2) forever);
#  - a metrics log naming its metric "<script>..." or "</text>" gives a
#    well-formed SVG with no script element;
#  - `dtrain k8s --env` with a byte that is not UTF-8 and a NEL gives YAML
#    that reads back as the same characters;
#  - `dtrain params show` prints a tensor named with control characters
#    escaped, and `dtrain checkpoint show` a file name;
#  - a host file with a NUL byte, an overlong line or an overlong host
#    name is refused with the line's number.
# (Links planted at the names dtrain writes are covered by ckpt_test,
# file_test and integration/launch_ssh.sh.)
. "$(dirname "$0")/../integration/cluster_lib.bash"
command -v python3 >/dev/null || fail "python3 is needed to check the SVG and the YAML"

# refused NAME STATUS PATTERN CMD...: CMD exits with STATUS within 20 s
# (it is killed after 20: a hang fails the case, not the suite) and its
# standard error matches PATTERN.
refused() {
	local name=$1 want=$2 pattern=$3 rc
	shift 3
	timeout 20 "$@" >"$T_DIR/$name.out" 2>"$T_DIR/$name.err" </dev/null
	rc=$?
	[ "$rc" -ne 124 ] || fail "$name: hung (killed after 20 s)"
	[ "$rc" -eq "$want" ] || fail "$name: status $rc, expected $want: $(cat "$T_DIR/$name.err")"
	grep -Eq -- "$pattern" "$T_DIR/$name.err" ||
		fail "$name: no '$pattern' in: $(cat "$T_DIR/$name.err")"
	log "$name: status $rc, $(head -c 200 "$T_DIR/$name.err")"
}

# 1. FIFOs, with no writer: an open without O_NONBLOCK waits forever.
fifo=$T_DIR/fifo
mkfifo "$fifo"
refused ckpt_fifo 1 "checkpoint $fifo is not a regular file" \
	"$DTRAIN" checkpoint show "$fifo"
refused params_fifo 2 "params $fifo is not a regular file" \
	"$DTRAIN" params show "$fifo"
refused plot_fifo 1 "metrics log $fifo is not a regular file" \
	"$DTRAIN" plot "$fifo" -o "$T_DIR/x.svg"
refused hosts_fifo 2 "-H $fifo is not a regular file" \
	"$DTRAIN" launch --dry-run -n 1 -H "$fifo" -- true
job_env "$(free_port)" 1 1
export DMLC_ROLE=server
(unset DTRAIN_SECRET; DTRAIN_SECRET_FILE=$fifo refused secret_fifo 1 \
	"DTRAIN_SECRET_FILE=$fifo is not a regular file" "$DTRAIN" server) ||
	exit 1
unset DMLC_ROLE

# 2. The SVG of a metrics log whose names carry markup.
cat >"$T_DIR/evil.jsonl" <<'EOF'
{"run":"</text><script>alert(2)</script>","epoch":0,"batch":-1,"samples_per_sec":null,"metric":"<script>alert(1)</script>","train":0.5,"val":0.4,"loss":null,"val_loss":null,"comm_s":null,"wall_s":1.0}
{"run":"</text><script>alert(2)</script>","epoch":1,"batch":-1,"samples_per_sec":null,"metric":"<script>alert(1)</script>","train":0.7,"val":0.6,"loss":null,"val_loss":null,"comm_s":null,"wall_s":2.0}
EOF
timeout 20 "$DTRAIN" plot "$T_DIR/evil.jsonl" -o "$T_DIR/evil.svg" >"$T_DIR/plot.out" 2>&1 ||
	fail "plot: $(cat "$T_DIR/plot.out")"
python3 - "$T_DIR/evil.svg" <<'EOF' || fail "plot: the SVG is malformed or has a script element"
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
tags = [e.tag.split('}')[-1] for e in root.iter()]
assert 'script' not in tags, tags
texts = [e.text or '' for e in root.iter()]
assert any('<script>alert(1)</script>' in t for t in texts), 'metric name not shown'
assert any('</text><script>alert(2)</script>' in t for t in texts), 'run name not shown'
EOF
log "plot: well-formed SVG, the names shown as text, no script element"

# 3. YAML from `dtrain k8s --env` with a byte that is not UTF-8 (0xff) and
#    a NEL (U+0085, which YAML 1.1 takes as a line break).
value=$(printf 'a\xffb\xc2\x85c\xe2\x80\xa8d')
timeout 20 "$DTRAIN" k8s --name lin --image i -n 1 --env "ODD=$value" -- x \
	>"$T_DIR/k8s.yaml" 2>"$T_DIR/k8s.err" || fail "k8s: $(cat "$T_DIR/k8s.err")"
python3 - "$T_DIR/k8s.yaml" <<'EOF' || fail "k8s: the YAML does not read back"
import sys
import yaml
found = []
def walk(o):
    if isinstance(o, dict):
        if o.get('name') == 'ODD':
            found.append(o['value'])
        for v in o.values():
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
for d in yaml.safe_load_all(open(sys.argv[1], 'rb')):
    walk(d)
# 0xff, not UTF-8, becomes U+00FF (\xff in YAML); the rest as they were.
assert found and all(v == 'a\u00ffb\u0085c\u2028d' for v in found), found
EOF
log "k8s: the value reads back as a\\u00ffb\\u0085c\\u2028d"

# 4. A parameter file naming a tensor with a terminal's escape sequence.
python3 - "$T_DIR/evil.params" <<'EOF'
import struct, sys, zlib
name = b'w\x1b]0;owned\x07\x1b[31m\nfake line'
body = b'DTPARAMS' + struct.pack('<II', 1, 1)
body += struct.pack('<H', len(name)) + name + struct.pack('<II', 1, 2)
body += struct.pack('<Q', 2) + struct.pack('<2f', 1.0, 2.0)
open(sys.argv[1], 'wb').write(body + struct.pack('<I', zlib.crc32(body)))
EOF
timeout 20 "$DTRAIN" params show "$T_DIR/evil.params" >"$T_DIR/params.out" 2>&1 ||
	fail "params show: $(cat "$T_DIR/params.out")"
! grep -q $'\x1b' "$T_DIR/params.out" || fail "params show: a raw escape byte in the output"
grep -qF 'w\x1b]0;owned\x07\x1b[31m\nfake line' "$T_DIR/params.out" ||
	fail "params show: the name is not shown escaped: $(cat -v "$T_DIR/params.out")"
[ "$(wc -l <"$T_DIR/params.out")" -eq 2 ] || fail "params show: the name split a line"
log "params show: the name escaped on one line"
evil=$T_DIR/ck$'\x1b'"[2J"
echo junk >"$evil"
refused ckpt_name 1 'ck\\x1b\[2J: not a dtrain checkpoint' "$DTRAIN" checkpoint show "$evil"
! grep -q $'\x1b' "$T_DIR/ckpt_name.err" || fail "checkpoint show: a raw escape byte in the output"

# 5. Host files.
printf 'h1\nh2\0evil\n' >"$T_DIR/hosts_nul"
refused hosts_nul 2 "-H $T_DIR/hosts_nul line 2: holds a NUL byte" \
	"$DTRAIN" launch --dry-run -n 1 -H "$T_DIR/hosts_nul" -- true
{ echo h1; printf 'h2 #%01100d\n' 0; } >"$T_DIR/hosts_long"
refused hosts_long_line 2 "-H $T_DIR/hosts_long line 2: longer than 1024 bytes" \
	"$DTRAIN" launch --dry-run -n 1 -H "$T_DIR/hosts_long" -- true
{ echo h1; printf 'a%.0s' $(seq 300); echo; } >"$T_DIR/hosts_name"
refused hosts_long_name 2 "-H $T_DIR/hosts_name line 2: a host name of 300 bytes \(255 at most\)" \
	"$DTRAIN" launch --dry-run -n 1 -H "$T_DIR/hosts_name" -- true
log "all cases passed"

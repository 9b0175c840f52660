# Loopback ports for the benchmark scripts, sourced after they `cd` to the
# repository root: `. scripts/lib/ports.sh`. Never a fixed port, so two
# runs (or a run beside the test suite) cannot collide.

# A port nothing listens on now (the kernel's choice).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Returns once something accepts on 127.0.0.1:$1; after 20 s the calling
# script stops, naming itself and the port.
wait_port() {
  for _ in $(seq 1 400); do
    (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "${0##*/}: nothing listens on $1" >&2
  exit 1
}

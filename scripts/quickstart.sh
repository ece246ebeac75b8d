#!/bin/sh
# Installs the dependencies, builds receiptd and receiptctl, and starts the
# daemon in the background with its embedded default store: a SQLite file
# in ./state/ beside the checkout. Run it again to restart the daemon.
#   socket:  state/receiptd.sock      database: state/receiptd.db
#   log:     state/receiptd.log       pid:      state/receiptd.pid
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build >/dev/null
cmake --build build -j "$(nproc)"

state=$(pwd)/state
mkdir -p "$state"
if [ -f "$state/receiptd.pid" ] && kill -0 "$(cat "$state/receiptd.pid")" 2>/dev/null; then
	kill "$(cat "$state/receiptd.pid")"
	sleep 1
fi
nohup ./build/daemon/receiptd --socket "$state/receiptd.sock" \
	--db "$state/receiptd.db" >"$state/receiptd.log" 2>&1 &
echo $! >"$state/receiptd.pid"

i=0
while [ ! -S "$state/receiptd.sock" ] && [ $i -lt 50 ]; do
	sleep 0.1
	i=$((i + 1))
done
./build/client/receiptctl --socket "$state/receiptd.sock" ping
echo "receiptd is running (pid $(cat "$state/receiptd.pid")); try:"
echo "  ./build/client/receiptctl --socket state/receiptd.sock stats"
echo "  kill \$(cat state/receiptd.pid)    # to stop it"

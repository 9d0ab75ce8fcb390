#!/usr/bin/env python3
"""A TCP forwarder that delays every byte by a fixed time each way: a long
link's round trip, without netem (the VMs here have none).

  python3 bench/delay_forwarder.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS

Each connection accepted is forwarded to the target; what one side sends
reaches the other DELAY_MS later (2 x DELAY_MS of round trip), in order and
at the rate it came. The bandwidth is the forwarder's own (a few hundred
MB/s on one core). Exits 0 on SIGTERM.
"""
import asyncio
import signal
import sys
import time


def host_port(text):
  host, _, port = text.rpartition(":")
  return host, int(port)


async def delayed(reader, writer, delay):
  """Copies reader to writer, each piece `delay` seconds after it came."""
  queue = asyncio.Queue()

  async def read():
    data = b""
    try:
      while True:
        data = await reader.read(1 << 20)
        await queue.put((time.monotonic() + delay, data))
        if not data:
          return
    finally:
      if data:  # a reset or a cancel: the writer still ends, on time
        queue.put_nowait((time.monotonic() + delay, b""))

  async def write():
    while True:
      due, data = await queue.get()
      wait = due - time.monotonic()
      if wait > 0:
        await asyncio.sleep(wait)
      if not data:
        writer.close()
        return
      writer.write(data)
      await writer.drain()

  await asyncio.gather(read(), write(), return_exceptions=True)


async def main():
  (listen_host, listen_port), target = host_port(sys.argv[1]), host_port(sys.argv[2])
  delay = float(sys.argv[3]) / 1000.0

  async def forward(client_reader, client_writer):
    try:
      target_reader, target_writer = await asyncio.open_connection(*target)
    except OSError:
      client_writer.close()
      return
    try:
      await asyncio.gather(delayed(client_reader, target_writer, delay),
                           delayed(target_reader, client_writer, delay), return_exceptions=True)
    finally:
      client_writer.close()
      target_writer.close()

  server = await asyncio.start_server(forward, listen_host, listen_port)
  stop = asyncio.Event()
  asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
  await stop.wait()
  server.close()  # the connections still open end with the process


if __name__ == "__main__":
  if len(sys.argv) != 4:
    sys.exit(__doc__)
  asyncio.run(main())

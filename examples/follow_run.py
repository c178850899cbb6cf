#!/usr/bin/python3
"""Follow a Megatron Workbench run and print its loss: the whole series, even when started late.
Usage: /usr/bin/python3 examples/follow_run.py RUN_DIR      (needs python3-zmq; docs/protocol.md)"""
import json, sys, zmq

info = json.load(open(sys.argv[1] + "/telemetry.json"))        # the ports the run bound
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")                               # every topic, heartbeats too
sub.connect(info["publish"])
req = ctx.socket(zmq.REQ)
req.connect(info["snapshot"])
next_seq = 0                                                     # first message we have not seen

def handle(m):
    global next_seq
    if m["seq"] < next_seq: return                               # seen already
    next_seq = m["seq"] + 1
    if m["topic"] == "step": print(f"iteration {m['iteration']}: loss {m['lm_loss']}", flush=True)
    if m["topic"] == "run.end": print("run ended:", m["status"]); sys.exit(0)

def catch_up():                                                  # "everything since seq N", page by page
    while True:
        req.send_json({"schema": "mwb.snapshot/1", "since": next_seq})
        header, *messages = req.recv_multipart()
        for raw in messages: handle(json.loads(raw))
        if not json.loads(header)["more"]: return

catch_up()                                                       # subscribed first: nothing falls between
while True:
    topic, raw = sub.recv_multipart()
    m = json.loads(raw)
    if topic == b"heartbeat" or m["seq"] > next_seq:             # a gap, or news of one: fill it
        if m["seq"] >= next_seq: catch_up()
    if topic != b"heartbeat": handle(m)

"""Statistics and in-process timing shared by bench, choose and the canary.

estimate.py  median over rounds with a 90% bootstrap interval, the weighted form, and when rounds may stop
ort.py       ONNX Runtime timed in this process with a served model's settings: sessions, runs, percentiles
"""

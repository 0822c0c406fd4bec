"""Where and how code runs:

- ``device``: the device the params name, resolved (CPU, CUDA, meta) and its facts;
- ``device_setting``: ``hardware.device`` resolved without importing torch first, the host's GPUs, the CUDA hint;
- ``gcpause``: the garbage collector paused around allocation-heavy loops;
- ``heap``: glibc's large blocks each mapped alone, so that freeing one gives its pages back;
- ``raycluster``: the Ray cluster of ``engine: ray`` (started on 127.0.0.1, or joined).
"""

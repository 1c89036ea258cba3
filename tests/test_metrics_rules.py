"""The alert rules of docs/metrics.md work as written: promtool checks their syntax and runs them
over series shaped like `parinfo watch --serve`'s and `parinfo host --serve`'s (skipped where
promtool is not installed)."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_server import documented_rules

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool is not installed (apt-get install prometheus)")

WIDE = 'cgroup="/sys/fs/cgroup/cpu/demo",instance="a:9464",job="parinfo"'
FITS = 'cgroup="/sys/fs/cgroup/cpu/fits",instance="b:9464",job="parinfo"'
H = 'instance="h:9464",job="parinfo"'
W = 'instance="w:9464",job="parinfo"'

UNIT_TESTS = f"""
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # a: held back 0.5 s per second, OpenBLAS at 4 threads on 1 usable CPU, 3 threads runnable
      - series: 'parinfo_cpu_throttled_seconds_total{{{WIDE}}}'
        values: '0+30x30'
      - series: 'parinfo_pool_threads{{instance="a:9464",job="parinfo",library="openblas",pid="42"}}'
        values: '4x30'
      - series: 'parinfo_usable_cpus{{instance="a:9464",job="parinfo"}}'
        values: '1x30'
      - series: 'parinfo_runnable_threads{{instance="a:9464",job="parinfo"}}'
        values: '3x30'
      # b: just as throttled, but its one pool fits its CPU, and 1 thread runnable
      - series: 'parinfo_cpu_throttled_seconds_total{{{FITS}}}'
        values: '0+30x30'
      - series: 'parinfo_pool_threads{{instance="b:9464",job="parinfo",library="openblas",pid="7"}}'
        values: '1x30'
      - series: 'parinfo_usable_cpus{{instance="b:9464",job="parinfo"}}'
        values: '1x30'
      - series: 'parinfo_runnable_threads{{instance="b:9464",job="parinfo"}}'
        values: '1x30'
    alert_rule_test:
      - eval_time: 3m
        alertname: ThrottledByAPoolWiderThanTheQuota
        exp_alerts: []
      - eval_time: 20m
        alertname: ThrottledByAPoolWiderThanTheQuota
        exp_alerts:
          - exp_labels: {{severity: warning, cgroup: /sys/fs/cgroup/cpu/demo, instance: "a:9464", job: parinfo}}
            exp_annotations:
              summary: "/sys/fs/cgroup/cpu/demo is throttled: a thread pool is wider than the CPU quota"
              description: "Limit the pools to parinfo_usable_cpus threads (parinfo apply container)."
      - eval_time: 20m
        alertname: MoreRunnableThreadsThanUsableCPUs
        exp_alerts:
          - exp_labels: {{severity: warning, instance: "a:9464", job: parinfo}}
            exp_annotations:
              summary: "a:9464: more runnable threads than usable CPUs"
              description: "Threads wait for CPUs: check the pools with parinfo show --pid."

  # host mode (h): every series per cgroup; watch mode (w): no cgroup label
  - interval: 1m
    input_series:
      # h, /jobs: pid 1 OpenBLAS 2, pid 2 OpenBLAS 1 in force and libgomp 2 predicted (launch-env: not
      # counted): 3 in force on 2 CPUs, 3 runnable
      - series: 'parinfo_pool_threads{{{H},cgroup="/jobs",library="openblas",name="python",pid="1",source="memory"}}'
        values: '2x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/jobs",library="openblas",name="python",pid="2",source="memory"}}'
        values: '1x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/jobs",library="libgomp",name="python",pid="2",source="launch-env"}}'
        values: '2x30'
      - series: 'parinfo_usable_cpus{{{H},cgroup="/jobs"}}'
        values: '2x30'
      - series: 'parinfo_runnable_threads{{{H},cgroup="/jobs"}}'
        values: '3x30'
      # h, /guess: busy, wider than its CPUs only by launch-env predictions (1 + 1 in force): no alert
      - series: 'parinfo_pool_threads{{{H},cgroup="/guess",library="openblas",name="py",pid="10",source="memory"}}'
        values: '1x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/guess",library="libgomp",name="py",pid="10",source="launch-env"}}'
        values: '2x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/guess",library="openblas",name="py",pid="11",source="memory"}}'
        values: '1x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/guess",library="libgomp",name="py",pid="11",source="launch-env"}}'
        values: '2x30'
      - series: 'parinfo_usable_cpus{{{H},cgroup="/guess"}}'
        values: '2x30'
      - series: 'parinfo_runnable_threads{{{H},cgroup="/guess"}}'
        values: '3x30'
      # h, /idle: pools just as wide, but 1 thread runnable: they do not compete
      - series: 'parinfo_pool_threads{{{H},cgroup="/idle",library="openblas",name="python",pid="3",source="memory"}}'
        values: '2x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/idle",library="openblas",name="python",pid="4",source="memory"}}'
        values: '2x30'
      - series: 'parinfo_usable_cpus{{{H},cgroup="/idle"}}'
        values: '2x30'
      - series: 'parinfo_runnable_threads{{{H},cgroup="/idle"}}'
        values: '1x30'
      # h, /fits: busy, but its pools (1 + 1) fit its 2 CPUs
      - series: 'parinfo_pool_threads{{{H},cgroup="/fits",library="openblas",name="python",pid="5",source="memory"}}'
        values: '1x30'
      - series: 'parinfo_pool_threads{{{H},cgroup="/fits",library="openblas",name="python",pid="6",source="memory"}}'
        values: '1x30'
      - series: 'parinfo_usable_cpus{{{H},cgroup="/fits"}}'
        values: '2x30'
      - series: 'parinfo_runnable_threads{{{H},cgroup="/fits"}}'
        values: '3x30'
      # h, /brief: oversubscribed and busy for 6 minutes only, then limited
      - series: 'parinfo_pool_threads{{{H},cgroup="/brief",library="openblas",name="python",pid="7",source="memory"}}'
        values: '4x6 1x24'
      - series: 'parinfo_usable_cpus{{{H},cgroup="/brief"}}'
        values: '1x30'
      - series: 'parinfo_runnable_threads{{{H},cgroup="/brief"}}'
        values: '4x6 1x24'
      # w: one watched process, OpenBLAS at 4 threads on 1 usable CPU, 3 runnable
      - series: 'parinfo_pool_threads{{{W},library="openblas",pid="9"}}'
        values: '4x30'
      - series: 'parinfo_usable_cpus{{{W}}}'
        values: '1x30'
      - series: 'parinfo_runnable_threads{{{W}}}'
        values: '3x30'
    alert_rule_test:
      - eval_time: 8m
        alertname: HostOversubscribed
        exp_alerts: []
      - eval_time: 20m
        alertname: HostOversubscribed
        exp_alerts:
          - exp_labels: {{severity: warning, cgroup: /jobs, instance: "h:9464", job: parinfo}}
            exp_annotations:
              summary: "h:9464 /jobs: native pools wider than the CPUs they share"
              description: "3 pool threads on fewer CPUs: parinfo host --once names the processes and the fix."
          - exp_labels: {{severity: warning, instance: "w:9464", job: parinfo}}
            exp_annotations:
              summary: "w:9464 : native pools wider than the CPUs they share"
              description: "4 pool threads on fewer CPUs: parinfo host --once names the processes and the fix."
"""


def test_the_documented_rules_are_valid(tmp_path):
    (tmp_path / "rules.yml").write_text(documented_rules())
    proc = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yml")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 3 rules found" in proc.stdout + proc.stderr


def test_the_documented_rules_fire_where_they_should_and_only_there(tmp_path):
    (tmp_path / "rules.yml").write_text(documented_rules())
    (tmp_path / "tests.yml").write_text(UNIT_TESTS)
    proc = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr

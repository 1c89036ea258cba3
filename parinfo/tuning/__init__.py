"""parinfo tune: the reference's thread sweep, measured on the user's workload, written as a profile.

Modules, in the order a tune uses them:
  options    TuneOptions (what was asked) checked and resolved into a Plan for this machine
  workloads  the typed workload spec, one class per kind (matmul, elementwise, ensemble, stmt,
             module, command); kernels holds the built-ins' numpy/torch code, usercode the user's
  measure    one point timed with its counts in force (worker process, command, in-process), noise
  timing     the timing loop itself; worker is the fresh process that runs it for one point
  search     which points to measure and which the measurements rule out (pure)
  sweep      tune() and run(): the options through the search to a result
  outcome    TuneOutcome, what a tune found as data; writers (JSON, profile YAML) and plot (text,
             SVG/PNG) read it; result's TuneResult, the public type, adds the methods that call them
"""

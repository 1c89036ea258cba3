"""Profiles: the YAML language, its resolution on a machine, and applying it in this process.

A profile is declared, loaded, validated and resolved into a Plan here, and applied in this process
(through the runtime). Running a program or N pinned instances under a Plan is the launch layer's
(parinfo.launch); the start-up hook a launched program runs lives here (hook/), beside the import
watch ``parinfo.apply()`` shares with it.
"""

"""The libraries a plan preloads: the allocator and the OpenMP runtime a profile names, found on
this machine (a ProfileError when one is not installed), and the variables they bring.
"""
from __future__ import annotations

from parinfo.process import libraries as reg, preload as pre
from parinfo.profiles.model import Profile
from parinfo.profiles.plan import Preload


def _skips(found: pre.Found) -> str:
    """The folders the search passed over (as root, another user's), for the plan's 'why'."""
    return f" ({found.skipped_note()})" if found.skipped else ""


class Preloads:
    """The preload choices of one profile, made by :meth:`choose`; notes go to ``notes``."""

    def __init__(self, prof: Profile, notes: list[str]) -> None:
        self.prof = prof
        self.notes = notes
        # chosen by choose()
        self.allocator: pre.Allocator | None = None
        self.allocator_conf: str | None = None
        self.runtime: pre.OpenMPRuntime | None = None

    def _where(self, key: str) -> tuple[str, ...]:
        """The key path of a preload choice's word (``allocator.name`` in the mapping form)."""
        return (key, "name") if self.prof.mark(key, "name") else (key,)

    def _not_installed(self, key: str, word: str, label: str, files: tuple[str, ...], install: str,
                       found: pre.Found) -> Exception:
        others = "; ".join([*(f"{path} is {what}" for path, what in found.rejected),
                            *([found.skipped_note()] if found.skipped else [])])
        return self.prof.error(self._where(key),
                               f"{key} {word}: {label} is not installed (no {' or '.join(files)} in "
                               f"the Python environment or the system's library paths"
                               + (f"; {others}" if others else "") + ")", f"install it: {install}")


    def choose(self) -> list[Preload]:
        """Find the allocator and the OpenMP runtime the profile names (ProfileError when one is
        not installed); ``auto`` takes the first allocator installed, in the records' order."""
        out: list[Preload] = []
        spec = self.prof.allocator
        if spec is not None:
            name, self.allocator_conf = spec.name, spec.conf
            if name == pre.DEFAULT:
                out.append(Preload("allocator", name, None, "default: the C library's malloc, nothing preloaded"))
            elif name == pre.AUTO:
                tried: list[str] = []
                for rec in pre.ALLOCATORS:
                    if not rec.preloadable:
                        continue
                    found = pre.locate_allocator(rec)
                    if found.path is not None:
                        self.allocator = rec
                        earlier = f" ({', '.join(tried)} not installed)" if tried else ""
                        out.append(Preload("allocator", rec.name, found.path,
                                           f"auto: {rec.label}, the first installed of "
                                           f"{', '.join(a.name for a in pre.ALLOCATORS if a.preloadable)}{earlier} "
                                           f"({rec.name} {rec.auto_why}); found in {found.where}{_skips(found)}"))
                        break
                    tried.append(rec.name)
                else:
                    out.append(Preload("allocator", pre.DEFAULT, None,
                                       f"auto: none of {', '.join(tried)} is installed; the C library's malloc stays"))
                    self.notes.append(f"allocator auto: none of {', '.join(tried)} is installed, so nothing is "
                                      f"preloaded (install one: {pre.allocator(tried[0]).install})")
            else:
                rec = pre.allocator(name)
                found = pre.locate_allocator(rec)
                if found.path is None:
                    raise self._not_installed("allocator", name, rec.label, rec.files, rec.install, found)
                self.allocator = rec
                out.append(Preload("allocator", name, found.path,
                                   f"set in the profile; found in {found.where}{_skips(found)}"))
        word = self.prof.openmp
        if word is not None:
            if word == pre.DEFAULT:
                out.append(Preload("openmp", word, None, "default: whichever runtime the program's libraries load"))
            else:
                rt = pre.openmp_runtime(word)
                found = pre.locate_runtime(rt)
                if found.path is None:
                    raise self._not_installed("openmp", word, rt.label, rt.files, rt.install, found)
                self.runtime = rt
                out.append(Preload("openmp", word, found.path, f"set in the profile; found in {found.where}: it "
                                   f"serves every omp_* and GOMP_* call of the program{_skips(found)}"))
        return out

    def env(self, env: dict[str, str], why: dict[str, str]) -> None:
        """The variables that come with the preloaded libraries; a variable the profile's ``env``
        sets keeps the profile's value."""
        own = self.prof.env
        wanted: list[tuple[str, str, str]] = []
        rec = self.allocator
        if rec is not None and rec.conf_var:
            if self.allocator_conf is not None:
                wanted.append((rec.conf_var, self.allocator_conf, f"allocator {rec.name}: conf in the profile"))
            elif rec.server_conf:
                wanted.append((rec.conf_var, rec.server_conf, f"allocator {rec.name}: parinfo's server settings: "
                               f"{rec.server_why}"))
        rt = self.runtime
        if rt is not None:
            word = own.get(reg.role_var("wait_policy"), self.prof.wait_policy or "")
            passive = str(word).strip().lower() == "passive"
            wanted += rt.settings(passive)
        for var, value, reason in wanted:
            if var not in own:
                env[var] = value
                why[var] = reason

    def finish(self, p: Preload, env: dict[str, str], pinned: bool) -> Preload:
        """``p`` with the variables it brought into ``env`` (not those the profile's env sets), and
        for an OpenMP runtime why its threads are left unbound, when they are."""
        own = self.prof.env
        why = p.why
        may: tuple[str, ...] = ()
        if p.key == "allocator" and self.allocator is not None and self.allocator.conf_var:
            may = (self.allocator.conf_var,)
        if p.key == "openmp" and self.runtime is not None:
            may = self.runtime.variables
            unbound = self.runtime.unbound_why(pinned)
            why += f"; {unbound}" if unbound else ""
        return Preload(p.key, p.choice, p.path, why, tuple(v for v in may if v in env and v not in own))

"""What the user asked to evaluate against, before anything is loaded: :class:`TargetSpec`.

A spec names a release, profiles and a box; :meth:`TargetSpec.resolve` loads them into a
:class:`~bisect_spec.runtime.session.Target`. Every workflow builds one (the API re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from bisect_spec.model.flags import inherited_env
from bisect_spec.runtime import environments, profiles, sources
from bisect_spec.runtime.session import Target

DEFAULT_MODEL = "kimi-k2.6"
DEFAULT_DRAFT = "eagle3"


@dataclass(frozen=True)
class TargetSpec:
    """What the user asked to evaluate against, before anything is loaded."""

    release: str | None = None
    model: str = DEFAULT_MODEL
    draft: str | None = DEFAULT_DRAFT
    hardware: str = "auto"
    gpus: int = profiles.DEFAULT_GPUS
    model_path: str | None = None
    draft_path: str | None = None
    #: ``--env VAR=VALUE`` assignments; they win over the caller's own ``SGLANG_*`` variables
    env: tuple[tuple[str, str], ...] = ()
    #: take the caller's ``SGLANG_*`` variables too (off when resuming: the run's own are used)
    inherit_env: bool = True
    #: the model / draft profile was chosen by the caller (not a default): a pasted command's own
    #: model path must then agree with it; a default gives way to what the command names
    model_chosen: bool = True
    draft_chosen: bool = True

    def resolve(self) -> Target:
        """Load profiles and pick the release (newest installed when unset).

        :raises ProfileError: unknown model/draft/hardware. :raises ReleaseError: release not installed.
        """
        model = profiles.load_model(self.model, path=self.model_path)
        draft = profiles.load_draft(self.draft, model, path=self.draft_path)
        hardware = profiles.load_hardware(self.hardware, self.gpus)
        release = self.release or environments.newest_installed()
        if sources.is_source_spec(release):  # git:PATH@REV or path:DIR: its tree over the release at or before it
            release = sources.register(release)
        sources.environment_for(release)
        env = {**(inherited_env() if self.inherit_env else {}), **dict(self.env)}
        return Target(release, model, draft, hardware, tuple(sorted(env.items())))

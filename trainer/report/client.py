"""The trainer's calls to its own run on the webapp: claim it, read its RunConfig and its team tools
and rewards, download its dataset (bearer token; paths: :mod:`trainer.contract`; retries:
:data:`trainer.report.retry.POLICY`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from trainer.contract import CLAIM_PATH, CONFIG_PATH, DATASET_PATH, SPECS_PATH, ClaimRequest, RunSpecs
from trainer.report.retry import POLICY, PermanentHttpError, RetryPolicy, raise_for_status, run_api_client

if TYPE_CHECKING:
    from trainer.config import RunConfig


class RunApiClient:
    """The trainer's reads from the webapp: its RunConfig and its dataset files (bearer token)."""

    def __init__(
        self,
        api_url: str,
        run_id: int | str,
        token: str,
        *,
        timeout_s: float = 60.0,
        retry: RetryPolicy = POLICY,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.run_id = run_id
        self._client = run_api_client(api_url, token, timeout_s=timeout_s, transport=transport)
        self._retrying = retry.retrying()

    def fetch_config_json(self) -> str:
        def get() -> str:
            response = self._client.get(CONFIG_PATH.format(run_id=self.run_id))
            raise_for_status(response)
            return response.text

        return self._retrying(get)

    def claim(self, worker: str, claimant: str) -> bool:
        """Take ownership of the run for the launch ``claimant``; False when another process already
        owns it (HTTP 409)."""

        def post() -> bool:
            response = self._client.post(
                CLAIM_PATH.format(run_id=self.run_id),
                content=ClaimRequest(worker=worker, claimant=claimant).model_dump_json(),
                headers={"Content-Type": "application/json"},
            )
            if response.status_code == 409:
                return False
            raise_for_status(response)
            return True

        return bool(self._retrying(post))

    def fetch_specs(self) -> RunSpecs:
        """The team tools and rewards the run's config names, secrets included (a claimed run only).

        PermanentHttpError (409) carries the web app's message naming a tool that became unavailable."""

        def get() -> RunSpecs:
            response = self._client.get(SPECS_PATH.format(run_id=self.run_id))
            raise_for_status(response)
            return RunSpecs.model_validate_json(response.content)

        return self._retrying(get)

    def fetch_config(self) -> RunConfig:
        from trainer.config import RunConfig

        return RunConfig.from_json(self.fetch_config_json())

    def download_dataset(self, split: str, dest_dir: str | Path) -> Path | None:
        """Save the run's ``split`` parquet file into ``dest_dir``; None when the run has no such split."""
        dest = Path(dest_dir) / f"{split}.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._retrying(self._download, split, dest)
        except PermanentHttpError as error:
            if error.status_code == 404:
                return None
            raise
        return dest

    def _download(self, split: str, dest: Path) -> None:
        partial = dest.with_name(dest.name + ".part")
        with self._client.stream("GET", DATASET_PATH.format(run_id=self.run_id, split=split)) as response:
            if not 200 <= response.status_code < 300:
                response.read()
                raise_for_status(response)
            with partial.open("wb") as handle:
                for chunk in response.iter_bytes():
                    handle.write(chunk)
        os.replace(partial, dest)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RunApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

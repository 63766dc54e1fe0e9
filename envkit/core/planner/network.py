"""Where a step's artifacts come from: the internet, the site's mirrors, or only the build context.

Pure. With a site file a step that would reach the internet is refused; offline, any step that
would reach a network at all is refused. Every refusal names the step and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from envkit.errors import InputError
from envkit.model.plan import Network
from envkit.model.site import Site


def refusal(step: str, what: str, fix: str) -> InputError:
    return InputError(f"step `{step}` {what}", fix)


@dataclass(frozen=True)
class NetworkPolicy:
    site: Site
    offline: bool

    def url(self, step: str, url: str) -> tuple[str, Network]:
        """(the URL to use, what it reaches). Refuses a URL the site does not mirror."""
        if self.offline:
            raise refusal(step, f"needs {url} in offline mode", "carry the artifact in the build context (envkit bundle) instead")
        if not self.site.given:
            return url, Network.INTERNET
        mirrored = self.site.rewrite(url)
        if mirrored is None:
            host = urlsplit(url)
            raise refusal(step, f"needs {url}, which {self.site.path} does not mirror",
                          f"add [rewrite] \"{host.scheme}://{host.netloc}\" = \"<your mirror of it>\" to the site file, or build --offline "
                          "from a bundle")
        return mirrored, Network.SITE

    def index(self, step: str) -> Network:
        """What a pip install from the Python package index reaches. Refuses a site without an index."""
        if self.offline:
            return Network.NONE
        if self.site.given and not self.site.pip_index:
            raise refusal(step, f"installs from a Python package index, which {self.site.path} does not name",
                          "add [pip] index_url = \"http://<your mirror>/simple\" to the site file")
        return Network.SITE if self.site.given else Network.INTERNET

    def apt(self, step: str, os_name: str) -> Network:
        """What apt reaches online. Refuses a site that does not mirror the distribution's archive."""
        if self.site.given and not self.site.apt_mirror:
            raise refusal(step, f"needs {os_name}'s package archive, which {self.site.path} does not mirror",
                          "add [apt] mirror = \"http://<your mirror>/ubuntu\" (or /debian) to the site file")
        return Network.SITE if self.site.apt_mirror else Network.INTERNET

"""The viewer pages (HTML, CSS, JavaScript), served by ``serve.api.routes.viewer``."""

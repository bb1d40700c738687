"""The viewer pages (HTML, CSS, JavaScript), served by ``serve.routes.viewer``."""

from django.contrib.auth.middleware import LoginRequiredMiddleware


class PortalLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Login required on every page; the API answers 401/403 as JSON through DRF instead of
    redirecting a script to an HTML login form."""

    def process_view(self, request, view_func, view_args, view_kwargs):  # type: ignore[no-untyped-def]
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)

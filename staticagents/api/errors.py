from rest_framework.views import exception_handler  # noqa: F401

"""The HTTP gateway (``headrace gateway``): an OpenAI-compatible face on the pipeline and on
bulk jobs. ``gateway.create_app`` builds the app; one router module per resource
(``embeddings_api``, ``completions``, ``models_api``, ``files_api``, ``batches_api``,
``jobs_api``, ``usage_api``); ``api`` holds authentication and OpenAI's error shape,
``body_limit`` and ``http_observability`` the middleware. It sits above ``headrace.jobs``,
which holds the jobs themselves (store, runner, pool, formats, files): nothing there knows
HTTP."""

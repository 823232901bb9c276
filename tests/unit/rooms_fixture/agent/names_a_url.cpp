// Deliberately wrong: a core room may not know where a surface serves a
// result. The rooms check must name this literal.
const char* files_at = "/v1/sessions/";

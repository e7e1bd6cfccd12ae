"""/login and /logout: the form that asks for the dashboard's token (when it has one)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from vesti_scrapy.web.auth import Guard, log_in, log_out, require_csrf, safe_next
from vesti_scrapy.web.templating import render

router = APIRouter()


@router.get("/login")
def login_form(request: Request, next: str = "/") -> Response:
    guard: Guard = request.app.state.guard
    if not guard.token:
        return RedirectResponse(safe_next(next), status_code=303)
    return render(request, "login.html", {"next": safe_next(next), "error": None})


@router.post("/login", dependencies=[Depends(require_csrf)])
def login(
    request: Request,
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    guard: Guard = request.app.state.guard
    response = RedirectResponse(safe_next(next), status_code=303)
    if not guard.token or log_in(guard, token, response, request):
        return response
    context = {"next": safe_next(next), "error": "That is not the token."}
    return render(request, "login.html", context, 401)


@router.post("/logout", dependencies=[Depends(require_csrf)])
def logout(request: Request) -> Response:
    guard: Guard = request.app.state.guard
    response = RedirectResponse("/login" if guard.token else "/", status_code=303)
    log_out(response)
    return response

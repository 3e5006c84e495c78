package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/dabom/dpcs/service/store"
)

// NoteView is a care agent's (or an admin's) note on a family.
type NoteView struct {
	ID         int64     `json:"id"`
	FamilyID   int64     `json:"familyId"`
	AuthorID   int64     `json:"authorId"`
	AuthorName string    `json:"authorName,omitempty" doc:"The author's name now"`
	Body       string    `json:"body"`
	CreatedAt  time.Time `json:"createdAt"`
}

func noteView(n store.FamilyNote) NoteView {
	return NoteView{ID: n.ID, FamilyID: n.FamilyID, AuthorID: n.AuthorID, AuthorName: n.AuthorName, Body: n.Body, CreatedAt: n.CreatedAt}
}

// NoteList is a family's notes, newest first.
type NoteList struct {
	Notes []NoteView `json:"notes"`
}

// NoteCreate is a new note.
type NoteCreate struct {
	Body MultilineText `json:"body" minLength:"1" maxLength:"1000" doc:"What the family called about and what was done, 1 to 1000 characters. Stored in Unicode NFC; control and invisible characters are refused (422); line feeds (U+000A) are kept."`
}

type notesInput struct {
	FamilyPath
	Limit int `query:"limit" minimum:"0" maximum:"500" doc:"At most this many (0: 100)"`
}

type noteCreateInput struct {
	FamilyPath
	Body NoteCreate
}

// noteWriter authorizes writing a note: ADMIN, and AGENT too — a care
// agent's own record of a call, the one write an AGENT makes (it changes
// nothing of the family's).
func (a *Server) noteWriter(ctx context.Context) (Principal, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return p, huma.Error401Unauthorized("not authenticated")
	}
	if !p.Role.BackOffice() {
		return p, huma.Error403Forbidden("back-office route: ADMIN or AGENT only")
	}
	return p, nil
}

func (a *Server) registerNotes() {
	op := func(id, method, summary, doc string, errs ...int) huma.Operation {
		return huma.Operation{OperationID: id, Method: method, Path: "/admin/families/{familyId}/notes", Summary: summary,
			Description: doc, Tags: []string{adminTag}, Security: secured(),
			Errors: append([]int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}, errs...)}
	}
	huma.Register(a.api, op("list-family-notes", http.MethodGet, "A family's notes",
		"Care agents' and admins' notes on the family, newest first, with their authors' names. ADMIN and AGENT.",
		http.StatusUnprocessableEntity),
		func(ctx context.Context, in *notesInput) (*struct{ Body NoteList }, error) {
			if _, err := a.admin(ctx); err != nil {
				return nil, err
			}
			ns, err := a.cfg.Store.FamilyNotes(ctx, in.FamilyID, in.Limit)
			if err != nil {
				return nil, a.problem(ctx, err, "path.familyId")
			}
			out := &struct{ Body NoteList }{}
			out.Body.Notes = make([]NoteView, 0, len(ns))
			for _, n := range ns {
				out.Body.Notes = append(out.Body.Notes, noteView(n))
			}
			return out, nil
		})
	create := op("add-family-note", http.MethodPost, "Add a note on a family",
		"Records a note on the family (what it called about, what was done): ADMIN and AGENT — the one write a care "+
			"agent makes, since it changes nothing of the family's. Notes are never edited or deleted. A family holds "+
			"at most DPCS_FAMILY_MAX_NOTES notes (default 1,000): one more is 409 at path.familyId. Audited as "+
			"family-note.create.", http.StatusConflict, http.StatusUnprocessableEntity)
	create.DefaultStatus = http.StatusCreated
	huma.Register(a.api, create, func(ctx context.Context, in *noteCreateInput) (*struct{ Body NoteView }, error) {
		p, err := a.noteWriter(ctx)
		if err != nil {
			return nil, err
		}
		n, err := a.cfg.Family.AddNote(ctx, in.FamilyID, string(in.Body.Body), p.actor())
		if errors.Is(err, store.ErrConflict) {
			return nil, a.problem(ctx, err, "path.familyId")
		}
		if err != nil {
			return nil, a.problem(ctx, err, "body")
		}
		return &struct{ Body NoteView }{Body: noteView(n)}, nil
	})
}

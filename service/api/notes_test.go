package api

import (
	"net/http"
	"testing"
)

// TestFamilyNotes: a care agent writes notes on a family and reads them
// back newest first with its name; what is not text is refused naming the
// field; a family that does not exist is 404.
func TestFamilyNotes(t *testing.T) {
	f := newAPIFixture(t)
	agent := f.token(agentID)
	var n NoteView
	f.call(http.MethodPost, "/admin/families/100/notes", agent, map[string]any{"body": "요금제 문의\n다음 달 변경 원함"}, http.StatusCreated, &n)
	if n.Body != "요금제 문의\n다음 달 변경 원함" || n.AuthorID != agentID || n.AuthorName == "" || n.FamilyID != famA {
		t.Fatalf("note: %+v", n)
	}
	f.call(http.MethodPost, "/admin/families/100/notes", f.token(adminID), map[string]any{"body": "해결"}, http.StatusCreated, nil)
	var list struct {
		Notes []NoteView `json:"notes"`
	}
	f.call(http.MethodGet, "/admin/families/100/notes", agent, nil, http.StatusOK, &list)
	if len(list.Notes) != 2 || list.Notes[0].Body != "해결" || list.Notes[1].ID != n.ID {
		t.Errorf("notes: %+v", list.Notes)
	}
	f.problem(http.MethodPost, "/admin/families/100/notes", agent, map[string]any{"body": "a\u0007b"}, http.StatusUnprocessableEntity, "body.body")
	f.problem(http.MethodPost, "/admin/families/100/notes", agent, map[string]any{"body": ""}, http.StatusUnprocessableEntity, "body.body")
	f.problem(http.MethodGet, "/admin/families/777/notes", agent, nil, http.StatusNotFound, "")
	f.problem(http.MethodPost, "/admin/families/777/notes", agent, map[string]any{"body": "x"}, http.StatusNotFound, "")
}

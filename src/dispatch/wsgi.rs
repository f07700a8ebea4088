//! WSGI dispatch: build `environ`, call the app on the loop thread or hand
//! it to the `--threads` pool, and frame what it returns.

use pyo3::prelude::*;
use pyo3::types::PyString;
use rush_proto::RequestHead;

use super::{Core, Outcome, RequestLine};
use crate::body::RequestBody;
use crate::conn::{AwaitingResponse, Connection, Phase};
use crate::wsgi::{build_environ, call_wsgi};

impl Core {
    /// Runs the WSGI app for a request, on this thread or on the pool.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dispatch_wsgi(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        head_bytes: &[u8],
        head: &RequestHead,
        body: RequestBody<'_>,
        keep_alive: bool,
    ) -> Outcome {
        let mut awaiting = AwaitingResponse::new(head, keep_alive, 200);
        let line = RequestLine::Raw(head_bytes, head);
        if connection.remote_strings.is_none() {
            if let Some(client) = connection.client {
                connection.remote_strings = Some((
                    PyString::new(py, &client.ip().to_string()).unbind(),
                    PyString::new(py, &client.port().to_string()).unbind(),
                ));
            }
        }
        let Some(settings) = &self.wsgi else {
            unreachable!("dispatch_wsgi is called only with a WSGI app");
        };
        let app = settings.app.clone_ref(py);
        let environ = build_environ(
            py,
            settings,
            head_bytes,
            head,
            body,
            connection.remote_strings.as_ref(),
        );
        let environ = match environ {
            Ok(environ) => environ,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        self.next_request_id += 1;
        awaiting.request_id = self.next_request_id;
        if let Some(scheduler) = &self.blocking_scheduler {
            return match scheduler.call1(py, (app, environ, key, awaiting.request_id)) {
                Ok(_) => {
                    awaiting.request_line = line.text().into_owned();
                    awaiting.request_head = head_bytes.to_vec();
                    connection.phase = Phase::AwaitingHandler(Box::new(awaiting));
                    Outcome::Pending
                }
                Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
            };
        }
        let result = call_wsgi(py, app.bind(py), &environ)
            .and_then(|response| Ok(Bound::new(py, response)?.into_any()));
        self.finish(py, connection, &awaiting, head_bytes, &line, result)
    }
}
